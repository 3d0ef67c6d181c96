// The annotation page's field renderers, one per field type (apps/annotation/field_types.py),
// each in static/js/annotation/fields/<type>.js registering itself here; annotate.js asks this
// table and never branches on a type's name. A renderer is an object with:
//   render(set, field, value, ctx)  fill the field's <fieldset> `set`; `value` is the answer to
//                                   show (undefined: none). ctx: example (the row, raw and HTML),
//                                   suggestion (the model's answer for this field), keys (the
//                                   hotkeys bound to this field), saveDraftSoon(), say(text)
//   collect(set, field)             the answer now in the fieldset, or undefined when empty
//   keys(field)                     optional: [{key, value}] hotkeys the field takes (all of
//                                   them, when no other field holds any yet)
//   spareKeys(field)                optional: the same, handed out after every field's keys
//   press(set, field, value)        optional: what a hotkey does (default: check or toggle the
//                                   input of that value)
//   comparesCandidates              true: the example shows the field's candidates side by side
//   prefillsFromSuggestion          false: the suggestion is not shown as the answer (the field
//                                   uses ctx.suggestion itself)
(function () {
  "use strict";

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  // A radio button or checkbox with its label.
  function choice(field, type, value, text, checked) {
    var id = "f-" + field.name + "-" + String(value).replace(/\W/g, "_");
    var wrap = el("label", { "class": "choice", "for": id });
    var input = el("input", { type: type, name: field.name, id: id, value: String(value) });
    input.checked = !!checked;
    wrap.append(input, document.createTextNode(" " + text));
    return wrap;
  }

  // The field's inputs that are checked.
  function checkedInputs(set, field) {
    return Array.prototype.filter.call(set.querySelectorAll("[name='" + field.name + "']"),
      function (input) { return input.checked; });
  }

  var keyName = window.Workbench.keyName;

  // Label hotkeys (single and multi label): the keys the server gave the labels.
  function labelKeys(field) {
    return field.labels.filter(function (label) { return label.hotkey; })
      .map(function (label) { return { key: label.hotkey, value: label.value }; });
  }

  var renderers = {};
  window.annotationFields = {
    renderers: renderers,
    register: function (type, renderer) { renderers[type] = renderer; },
    el: el, choice: choice, checkedInputs: checkedInputs, keyName: keyName, labelKeys: labelKeys,
    LETTERS: "abcdefgh"  // a preference's or ranking's candidates, in order (the server keeps them free)
  };
})();
