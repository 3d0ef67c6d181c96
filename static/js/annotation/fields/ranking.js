// ranking: pick the candidates best first (buttons, or their letter keys when no other field
// holds the letters); picking a ranked one again takes it and those after it back. Hidden inputs
// hold the order for collect().
(function () {
  "use strict";
  var f = window.annotationFields, el = f.el;
  function names(field) { return field.candidates.map(function (_, i) { return f.LETTERS[i].toUpperCase(); }); }
  f.register("ranking", {
    comparesCandidates: true,
    spareKeys: function (field) {
      return names(field).map(function (name) { return { key: name.toLowerCase(), value: name }; });
    },
    press: function (set, field, value) { set.rank(value); },
    render: function (set, field, value, ctx) {
      var all = names(field);
      set.ranking = (value || []).filter(function (name) { return all.indexOf(name) >= 0; });
      var order = el("ol", { "class": "ranking", "aria-live": "polite", "data-testid": "ranking-" + field.name });
      var hidden = all.map(function () { return el("input", { type: "hidden", name: field.name }); });
      var buttons = all.map(function (name) {
        var button = el("button", { type: "button", "aria-label": "rank " + name + " next" }, name);
        button.addEventListener("click", function () { set.rank(name); });
        return button;
      });
      function draw() {
        order.replaceChildren();
        set.ranking.forEach(function (name, place) { order.append(el("li", {}, (place === 0 ? "best: " : "") + name)); });
        hidden.forEach(function (input, place) { input.value = set.ranking[place] || ""; });
        buttons.forEach(function (button, i) { button.setAttribute("aria-pressed", String(set.ranking.indexOf(all[i]) >= 0)); });
      }
      set.rank = function (name) {
        var at = set.ranking.indexOf(name);
        if (at >= 0) set.ranking = set.ranking.slice(0, at); else set.ranking.push(name);
        draw();
        ctx.saveDraftSoon();
      };
      set.append(el("p", { "class": "help" }, "Pick the best first" + (ctx.keys.length ? " (keys " +
        ctx.keys.join(", ") + ")." : ".")));
      buttons.forEach(function (button) { set.append(button); });
      set.append(order);
      hidden.forEach(function (input) { set.append(input); });
      draw();
    },
    collect: function (set, field) {
      var order = Array.prototype.map.call(set.querySelectorAll("[name='" + field.name + "']"),
        function (input) { return input.value; });
      return order.every(Boolean) ? order : undefined;
    }
  });
})();
