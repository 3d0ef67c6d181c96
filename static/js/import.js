// Live progress of an import over its websocket; reconnects with backoff until it ends.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=import-progress]");
  if (!box || !window.WebSocket) return;
  var finished = ["succeeded", "failed", "cancelled"];
  if (finished.indexOf(box.dataset.state) >= 0) return;
  var bar = box.querySelector("progress");
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };

  function render(p) {
    field("state").textContent = p.state;
    field("rows").textContent = p.rows_done;
    if (p.rows_total_estimate) {
      bar.max = p.rows_total_estimate;
      field("total").textContent = " of about " + p.rows_total_estimate;
    }
    bar.value = p.rows_done;
    field("rate").textContent = p.rows_per_s ? "· " + Math.round(p.rows_per_s) + " rows/s" : "";
    field("eta").textContent = p.eta_s ? "· about " + Math.ceil(p.eta_s) + " s left" : "";
    field("error").textContent = p.error || "";
    if (finished.indexOf(p.state) >= 0) {
      var cancel = document.querySelector("[data-field=cancel]");
      if (cancel) cancel.remove();
      if (p.state === "succeeded" && p.version) {
        bar.value = bar.max = p.rows_done || 1;
        var link = document.createElement("a");
        link.href = box.dataset.versionUrl + p.version + "/";
        link.textContent = "Browse version " + p.version;
        field("result").replaceChildren(link);
      }
      return true;
    }
    return false;
  }

  window.liveSocket(box.dataset.socket, {
    message: function (data) { return !(data.type === "progress" && render(data.progress)); }
  });
})();
