// multi_label: any number of labels, checkboxes with their hotkeys (a key toggles its label).
(function () {
  "use strict";
  var f = window.annotationFields;
  f.register("multi_label", {
    keys: f.labelKeys,
    render: function (set, field, value) {
      field.labels.forEach(function (label) {
        set.append(f.choice(field, "checkbox", label.value,
          (label.hotkey ? "[" + f.keyName(label.hotkey) + "] " : "") + label.value, (value || []).indexOf(label.value) >= 0));
      });
    },
    collect: function (set, field) {
      var all = f.checkedInputs(set, field).map(function (input) { return input.value; });
      return all.length ? all : undefined;
    }
  });
})();
