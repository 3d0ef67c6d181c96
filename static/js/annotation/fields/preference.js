// preference: which candidate is better (keys a, b, …), a tie (t) or both bad (x).
(function () {
  "use strict";
  var f = window.annotationFields;
  f.register("preference", {
    comparesCandidates: true,
    keys: function (field) {
      var keys = field.candidates.map(function (_, i) { return { key: f.LETTERS[i], value: f.LETTERS[i].toUpperCase() }; });
      return keys.concat([{ key: "t", value: "tie" }, { key: "x", value: "both_bad" }]);
    },
    render: function (set, field, value) {
      field.candidates.forEach(function (_, i) {
        var key = f.LETTERS[i].toUpperCase();
        set.append(f.choice(field, "radio", key, "[" + f.LETTERS[i] + "] " + key + " is better", value === key));
      });
      set.append(f.choice(field, "radio", "tie", "[t] tie", value === "tie"));
      set.append(f.choice(field, "radio", "both_bad", "[x] both bad", value === "both_bad"));
    },
    collect: function (set, field) {
      var on = f.checkedInputs(set, field)[0];
      return on ? on.value : undefined;
    }
  });
})();
