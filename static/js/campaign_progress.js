// The campaign's progress, live: its socket sends the counts on connect and again (at most once
// a second) after annotators answer. Reconnects with backoff; the badge says when it is live.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=campaign-progress][data-socket]");
  if (!box) return;
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
  var delay = 1000;
  function connect() {
    var socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + box.dataset.socket);
    socket.onopen = function () { delay = 1000; field("live").hidden = false; };
    socket.onmessage = function (message) {
      var progress = JSON.parse(message.data).progress;
      if (!progress) return;
      field("bar").max = progress.annotations_needed;
      field("bar").value = progress.annotations;
      field("annotations").textContent = progress.annotations;
    };
    socket.onclose = function (event) {
      field("live").hidden = true;
      if (event.code === 4404 || event.code === 4403 || event.code === 4401) return;  // not ours to see
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
})();
