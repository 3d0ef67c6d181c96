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

// A websocket to this site that reconnects with backoff (1 s, doubling up to 30 s); every live
// page uses it. path: the path, or a function giving it at each connection (to resume after what
// the page has seen). handlers: message(data) gets each parsed message, and returning false ends
// the socket for good; open(socket) runs on each connection; closed(event, retrying) on each
// close; badge: an element shown only while the socket is open. A refusal (4400-4499: not logged
// in, not yours to see, gone, too many messages) is final too: retrying would only hammer.
window.liveSocket = function (path, handlers) {
  "use strict";
  if (!window.WebSocket) return;
  var delay = 1000;
  function connect() {
    var socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host +
                               (typeof path === "function" ? path() : path));
    var ended = false;
    socket.onopen = function () {
      delay = 1000;
      if (handlers.badge) handlers.badge.hidden = false;
      if (handlers.open) handlers.open(socket);
    };
    socket.onmessage = function (message) {
      if (handlers.message(JSON.parse(message.data)) === false) { ended = true; socket.close(); }
    };
    socket.onclose = function (event) {
      if (handlers.badge) handlers.badge.hidden = true;
      var retrying = !ended && !(event.code >= 4400 && event.code < 4500);
      if (handlers.closed) handlers.closed(event, retrying);
      if (!retrying) return;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
};

// Forms that undo work ask first: <form data-confirm="question">. Declined, nothing is sent.
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
}, true);
