// Live project activity: new audit events appear at the top of the dashboard's feed.
// Reconnects with backoff and says whether it is live. Text only: never inserts HTML.
(function () {
  "use strict";
  var list = document.querySelector("[data-socket]");
  var state = document.querySelector("[data-testid=live-state]");
  if (!list || !window.WebSocket) return;
  var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + list.dataset.socket;
  var delay = 1000;

  function setLive(live, text) {
    state.dataset.live = String(live);
    state.textContent = text;
  }

  function show(event) {
    var empty = list.querySelector(".empty");
    if (empty) empty.remove();
    var item = document.createElement("li");
    var time = document.createElement("time");
    time.dateTime = event.created_at;
    time.textContent = event.created_at.slice(0, 16).replace("T", " ");
    var actor = document.createElement("strong");
    actor.textContent = event.actor;
    item.append(time, " ", actor, " " + event.action + " " + event.target);
    list.prepend(item);
  }

  function connect() {
    var socket = new WebSocket(url);
    socket.onopen = function () { delay = 1000; setLive(true, "live"); };
    socket.onmessage = function (message) {
      var data = JSON.parse(message.data);
      if (data.type === "activity") show(data.event);
    };
    socket.onclose = function (closed) {
      if (closed.code === 4403 || closed.code === 4404) {
        setLive(false, "access ended");
        return;
      }
      setLive(false, "reconnecting…");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
})();
