// Export jobs (a dataset version's files, a campaign's resolved answers, a model's deployment files): the running ones are
// polled (a file being written is not worth a socket) at their own API address (data-export-url);
// when one ends, its row is replaced by the server's rendering of it (its download link or its new
// version), in place.
(function () {
  "use strict";
  document.querySelectorAll("[data-export-url]").forEach(function (item) {
    if (["succeeded", "failed", "cancelled"].indexOf(item.dataset.state) >= 0) return;
    var url = item.dataset.exportUrl;
    var timer = setInterval(function () {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (job) {
          if (!job) return;
          item.querySelector("[data-field=state]").textContent = job.state;
          var rows = item.querySelector("[data-field=rows]");
          if (rows) rows.textContent = job.rows_done !== undefined ? job.rows_done : job.rows;
          var steps = item.querySelector("[data-field=steps]");
          if (steps) steps.textContent = job.steps_done;
          if (["succeeded", "failed", "cancelled"].indexOf(job.state) < 0) return;
          clearInterval(timer);
          Workbench.refreshElement(item, "[data-export-url='" + url + "']");
        });
    }, 1000);
  });
})();
