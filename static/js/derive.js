// Live progress of the jobs running on a dataset version (splits, PII scans, redactions): each
// listens on its own socket and the page reloads when one ends, to show its result.
(function () {
  "use strict";
  document.querySelectorAll("[data-testid=derive-job]").forEach(function (box) {
    var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
    var bar = box.querySelector("progress");
    var delay = 1000;
    function connect() {
      var socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + box.dataset.socket);
      socket.onopen = function () { delay = 1000; field("live").hidden = false; };
      socket.onmessage = function (message) {
        var progress = JSON.parse(message.data).progress;
        if (!progress) return;
        field("state").textContent = progress.state;
        field("rows").textContent = progress.rows_done;
        bar.max = progress.rows_total || bar.max;
        bar.value = progress.rows_done;
        if (["succeeded", "failed", "cancelled"].indexOf(progress.state) >= 0) {
          socket.onclose = null;
          socket.close();
          location.reload();
        }
      };
      socket.onclose = function () {
        field("live").hidden = true;
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 30000);
      };
    }
    connect();
  });
})();
