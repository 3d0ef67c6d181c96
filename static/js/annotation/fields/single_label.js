// single_label: one label, radio buttons with their hotkeys.
(function () {
  "use strict";
  var f = window.annotationFields;
  f.register("single_label", {
    keys: f.labelKeys,
    render: function (set, field, value) {
      field.labels.forEach(function (label) {
        set.append(f.choice(field, "radio", label.value,
          (label.hotkey ? "[" + f.keyName(label.hotkey) + "] " : "") + label.value, value === label.value));
      });
    },
    collect: function (set, field) {
      var on = f.checkedInputs(set, field)[0];
      return on ? on.value : undefined;
    }
  });
})();
