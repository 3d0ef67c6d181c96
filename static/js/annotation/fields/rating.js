// rating: a whole number from field.min to field.max, each with its description if any.
(function () {
  "use strict";
  var f = window.annotationFields;
  f.register("rating", {
    render: function (set, field, value) {
      for (var n = field.min; n <= field.max; n++) {
        set.append(f.choice(field, "radio", n, String(n) + (field.scale[String(n)] ? " — " + field.scale[String(n)] : ""), value === n));
      }
    },
    collect: function (set, field) {
      var picked = f.checkedInputs(set, field)[0];
      return picked ? parseInt(picked.value, 10) : undefined;
    }
  });
})();
