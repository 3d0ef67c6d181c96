// spans: select text in the source and press a label's button; the source shows each span
// highlighted with its label, and the list below can remove one. Offsets count characters of
// the source text (code points, as the server counts them: an emoji is one), whatever
// highlights the selection crosses.
(function () {
  "use strict";
  var f = window.annotationFields, el = f.el;
  f.register("spans", {
    render: function (set, field, value, ctx) {
      var chars = Array.from(ctx.example[field.source] || "");
      var slice = function (start, end) { return chars.slice(start, end).join(""); };
      var source = el("div", { "class": "span-source", "data-testid": "span-source-" + field.name });
      var listBox = el("ul", { "class": "spans" });
      set.spans = (value || []).slice();
      function paint() {
        source.replaceChildren();
        var at = 0;
        set.spans.slice().sort(function (a, b) { return a.start - b.start || b.end - a.end; }).forEach(function (span) {
          if (span.start < at) return;  // overlaps one already painted: listed below only
          source.append(document.createTextNode(slice(at, span.start)));
          source.append(el("mark", { "class": "span", "data-label": span.label, "title": span.label,
                                     "data-testid": "span-mark" }, slice(span.start, span.end)));
          at = span.end;
        });
        source.append(document.createTextNode(slice(at)));
      }
      function draw() {
        paint();
        listBox.replaceChildren();
        set.spans.forEach(function (span, index) {
          var entry = el("li", {}, span.label + ": “" + slice(span.start, span.end) + "” ");
          var remove = el("button", { type: "button", "class": "link" }, "remove");
          remove.addEventListener("click", function () { set.spans.splice(index, 1); draw(); ctx.saveDraftSoon(); });
          entry.append(remove);
          listBox.append(entry);
        });
      }
      function offset(node, within) {  // characters of the source before (node, within)
        var before = document.createRange();
        before.selectNodeContents(source);
        before.setEnd(node, within);
        return Array.from(before.toString()).length;
      }
      set.append(source);
      field.labels.forEach(function (label) {
        var button = el("button", { type: "button" }, "Mark selection as " + label.value);
        button.addEventListener("click", function () {
          var selection = window.getSelection();
          if (!selection.rangeCount) return;
          var range = selection.getRangeAt(0);
          if (!source.contains(range.startContainer) || !source.contains(range.endContainer)) {
            ctx.say("Select text in the " + field.source + " first.");
            return;
          }
          var start = offset(range.startContainer, range.startOffset), end = offset(range.endContainer, range.endOffset);
          if (end > start) { set.spans.push({ start: start, end: end, label: label.value }); draw(); ctx.saveDraftSoon(); }
          selection.removeAllRanges();
        });
        set.append(button);
      });
      set.append(listBox);
      draw();
    },
    collect: function (set) { return set.spans.length ? set.spans : undefined; }
  });
})();
