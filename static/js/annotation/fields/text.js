// text: free text. A field that edits the response (prefill "response") or the model's draft
// (prefill "suggestion") starts from it and shows the word diff against it as it is edited.
(function () {
  "use strict";
  var f = window.annotationFields, el = f.el;

  // The edit against where it started, word by word (Workbench.wordDiff, app.js).
  function wordDiff(before, after) {
    var out = el("div", { "class": "diff", "data-testid": "diff" });
    var parts = Workbench.wordDiff(before, after);
    if (!parts) { out.textContent = "(too long to show a diff)"; return out; }
    parts.forEach(function (part) {
      out.append(part.op === "same" ? document.createTextNode(part.text) : el(part.op, {}, part.text));
    });
    return out;
  }

  f.register("text", {
    // The model's draft is what the text starts from (and is diffed against), not an answer.
    prefillsFromSuggestion: false,
    render: function (set, field, value, ctx) {
      var original = field.prefill === "response" ? ctx.example.response : field.prefill === "suggestion" ? ctx.suggestion : "";
      var area = el("textarea", { name: field.name, rows: "5", maxlength: String(field.max_length),
                                  "aria-label": field.name });
      area.value = value !== undefined ? value : (original || "");
      set.append(area);
      if (original) {
        var diffBox = el("div", { "class": "diff-box" });
        var showDiff = function () { diffBox.replaceChildren(wordDiff(original, area.value)); };
        area.addEventListener("input", showDiff);
        showDiff();
        set.append(el("p", { "class": "help" }, "Changes from the " + field.prefill + ":"), diffBox);
      }
    },
    collect: function (set, field) {
      var area = set.querySelector("[name='" + field.name + "']");
      return area.value !== "" ? area.value : undefined;
    }
  });
})();
