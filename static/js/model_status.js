// A model a worker is still checking, converting or merging: its status is polled at its API
// address (data-model-url), and when the worker moves it on, the model's card is replaced by the
// server's rendering of it (what the worker found), in place.
(function () {
  "use strict";
  function follow() {
    var badge = document.querySelector("[data-model-url]");
    if (!badge || ["checking", "converting"].indexOf(badge.dataset.status) < 0) return;
    var timer = setInterval(function () {
      fetch(badge.dataset.modelUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (model) {
          if (!model || model.status === badge.dataset.status) return;
          clearInterval(timer);
          Workbench.refreshElement(badge.closest("[data-testid=model-card]"), "[data-testid=model-card]").then(follow);
        });
    }, 1500);
  }
  follow();
})();
