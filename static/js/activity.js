// Live project activity: new audit events appear at the top of the dashboard's feed.
// Reconnects with backoff and says whether it is live. Text only: never inserts HTML.
(function () {
  "use strict";
  var list = document.querySelector("[data-socket]");
  var state = document.querySelector("[data-testid=live-state]");
  if (!list) return;

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

  window.liveSocket(list.dataset.socket, {
    open: function () { setLive(true, "live"); },
    message: function (data) { if (data.type === "activity") show(data.event); },
    closed: function (event, retrying) { setLive(false, retrying ? "reconnecting…" : "access ended"); }
  });
})();
