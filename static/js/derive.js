// Live progress of the jobs on a dataset version (splits, edits, PII scans, redactions): each
// listens on its own socket. A job that makes a version ends with a link to it here (the page was
// opened to follow it); a PII scan's report is fetched as the server renders it and put in place.
(function () {
  "use strict";
  var ENDED = ["succeeded", "failed", "cancelled"];
  document.querySelectorAll("[data-testid=derive-job]").forEach(function (box) {
    if (ENDED.indexOf(box.dataset.state) >= 0) return;  // ended before the page was drawn: shown as it is
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
        bar.value = progress.state === "succeeded" ? bar.max : progress.rows_done;
        if (ENDED.indexOf(progress.state) < 0) return true;
        box.dataset.state = progress.state;
        if (!box.dataset.makesVersion) {
          // A report rendered by the server: put in place where the box names it (a PII scan on the
          // version page); elsewhere (the statistics page draws its token chart on load) reloaded.
          if (box.dataset.report) Workbench.refreshElements([box.dataset.report]);
          else location.reload();
          return false;
        }
        var result = field("result");
        result.replaceChildren();
        if (progress.state === "succeeded" && progress.version) {
          var link = document.createElement("a");
          link.href = box.dataset.versionsUrl + progress.version + "/";
          link.textContent = "new version v" + progress.version;
          result.append("→ ", link);
        } else if (progress.error) {
          var error = document.createElement("span");
          error.className = "field-error";
          error.textContent = progress.error;
          result.append(error);
        }
        return false;
      }
    });
  });
})();
