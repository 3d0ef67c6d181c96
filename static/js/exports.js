// Export jobs on a version page: the running ones are polled (a file being written is not worth
// a socket) and the page reloads when one ends, to show its download link.
(function () {
  "use strict";
  document.querySelectorAll("[data-export]").forEach(function (item) {
    if (item.dataset.state === "succeeded" || item.dataset.state === "failed") return;
    var timer = setInterval(function () {
      fetch("/api/dataset-exports/" + item.dataset.export + "/", { credentials: "same-origin",
                                                                   headers: { "Accept": "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (job) {
          if (!job) return;
          item.querySelector("[data-field=state]").textContent = job.state;
          var rows = item.querySelector("[data-field=rows]");
          if (rows) rows.textContent = job.rows_done;
          if (job.state === "succeeded" || job.state === "failed") { clearInterval(timer); location.reload(); }
        });
    }, 1000);
  });
})();
