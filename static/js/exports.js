// Export jobs (a dataset version's files, a campaign's resolved answers): the running ones are
// polled (a file being written is not worth a socket) at their own API address (data-export-url)
// and the page reloads when one ends, to show its download link or its new version.
(function () {
  "use strict";
  document.querySelectorAll("[data-export-url]").forEach(function (item) {
    if (item.dataset.state === "succeeded" || item.dataset.state === "failed") return;
    var timer = setInterval(function () {
      fetch(item.dataset.exportUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (job) {
          if (!job) return;
          item.querySelector("[data-field=state]").textContent = job.state;
          var rows = item.querySelector("[data-field=rows]");
          if (rows) rows.textContent = job.rows_done !== undefined ? job.rows_done : job.rows;
          if (job.state === "succeeded" || job.state === "failed") { clearInterval(timer); location.reload(); }
        });
    }, 1000);
  });
})();
