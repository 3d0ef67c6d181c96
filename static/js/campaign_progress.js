// The campaign's progress, live: its socket sends the counts on connect and again (at most once
// a second) after annotators answer or the model suggestions move; the badge says when it is live.
// Managers and reviewers also get the agreement and annotator tables (server-rendered HTML) and
// the numbers behind the charts, passed on to campaign_dashboard.js.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=campaign-progress][data-socket]");
  if (!box) return;
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
  window.liveSocket(box.dataset.socket, {
    badge: field("live"),
    message: function (data) {
      var progress = data.progress;
      if (!progress) return true;
      field("bar").max = progress.annotations_needed;
      field("bar").value = progress.annotations;
      field("annotations").textContent = progress.annotations;
      var suggestions = document.querySelector("[data-testid=suggestions]");
      if (suggestions && progress.suggestions) {
        var s = progress.suggestions;
        suggestions.textContent = "suggestions: " + s.state + (s.total ? " (" + s.done + "/" + s.total + ")" : "");
      }
      var tables = document.querySelector("[data-testid=quality-tables]");
      if (tables && data.quality_html !== undefined) {
        tables.innerHTML = data.quality_html;  // rendered by our templates, autoescaped
        window.dispatchEvent(new CustomEvent("campaign-quality", { detail: data.quality }));
      }
      return true;
    }
  });
})();
