// A model a worker is still checking, converting or merging: its status is polled at its API
// address (data-model-url) and the page reloads once the worker is done, to show what it found.
(function () {
  "use strict";
  var badge = document.querySelector("[data-model-url]");
  if (!badge || ["checking", "converting"].indexOf(badge.dataset.status) < 0) return;
  var timer = setInterval(function () {
    fetch(badge.dataset.modelUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (model) {
        if (!model || model.status === badge.dataset.status) return;
        clearInterval(timer);
        location.reload();
      });
  }, 1500);
})();
