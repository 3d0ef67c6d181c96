// Small progressive enhancements for every page. Pages work without it.
(function () {
  "use strict";
  var toggle = document.querySelector(".nav-toggle");
  var nav = document.getElementById("main-nav");
  if (toggle && nav) {
    toggle.addEventListener("click", function () {
      var open = toggle.getAttribute("aria-expanded") === "true";
      toggle.setAttribute("aria-expanded", String(!open));
      nav.classList.toggle("open", !open);
    });
  }
  document.querySelectorAll(".copy-field").forEach(function (input) {
    input.addEventListener("focus", function () { input.select(); });
  });
})();

// A websocket to this site that reconnects with backoff (1 s, doubling up to 30 s). handlers:
// message(data) gets each parsed message, and returning false ends the socket for good; badge:
// an element shown only while the socket is live. A policy close (4401, 4403, 4404: not yours to
// see) is final too.
window.liveSocket = function (path, handlers) {
  "use strict";
  var delay = 1000;
  function connect() {
    var socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + path);
    var ended = false;
    socket.onopen = function () { delay = 1000; if (handlers.badge) handlers.badge.hidden = false; };
    socket.onmessage = function (message) {
      if (handlers.message(JSON.parse(message.data)) === false) { ended = true; socket.close(); }
    };
    socket.onclose = function (event) {
      if (handlers.badge) handlers.badge.hidden = true;
      if (ended || [4401, 4403, 4404].indexOf(event.code) >= 0) return;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
};
