// Live progress of the jobs running on a dataset version (splits, PII scans, redactions): each
// listens on its own socket and the page reloads when one ends, to show its result.
(function () {
  "use strict";
  document.querySelectorAll("[data-testid=derive-job]").forEach(function (box) {
    var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
    var bar = box.querySelector("progress");
    window.liveSocket(box.dataset.socket, {
      badge: field("live"),
      message: function (data) {
        var progress = data.progress;
        if (!progress) return true;
        field("state").textContent = progress.state;
        field("rows").textContent = progress.rows_done;
        bar.max = progress.rows_total || bar.max;
        bar.value = progress.rows_done;
        if (["succeeded", "failed", "cancelled"].indexOf(progress.state) < 0) return true;
        location.reload();
        return false;
      }
    });
  });
})();
