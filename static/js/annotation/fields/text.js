// text: free text. A field that edits the response (prefill "response") or the model's draft
// (prefill "suggestion") starts from it and shows the word diff against it as it is edited.
(function () {
  "use strict";
  var f = window.annotationFields, el = f.el;

  function wordDiff(before, after) {
    var a = before.split(/(\s+)/), b = after.split(/(\s+)/), out = el("div", { "class": "diff", "data-testid": "diff" });
    if (a.length * b.length > 4e6) { out.textContent = "(too long to show a diff)"; return out; }
    var lcs = [];
    for (var i = a.length; i >= 0; i--) {
      lcs[i] = [];
      for (var j = b.length; j >= 0; j--) {
        lcs[i][j] = i === a.length || j === b.length ? 0 :
          a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    i = 0; j = 0;
    while (i < a.length || j < b.length) {
      if (i < a.length && j < b.length && a[i] === b[j]) { out.append(document.createTextNode(a[i])); i++; j++; }
      else if (j < b.length && (i === a.length || lcs[i][j + 1] >= lcs[i + 1][j])) { out.append(el("ins", {}, b[j])); j++; }
      else { out.append(el("del", {}, a[i])); i++; }
    }
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
