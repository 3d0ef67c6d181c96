// The campaign form's label editor. For "Classify" the labels to classify into start as the
// chosen dataset version's labels (the most frequent first); the editor adds, renames and removes
// them and shows the key each will have on the annotation page (the order of field_types.HOTKEYS).
// It writes the list, one label a line, into the form's "Labels" textarea, which is what is sent:
// without this script the textarea itself is the editor.
(function () {
  "use strict";
  var textarea = document.getElementById("id_labels");
  var schema = document.getElementById("id_schema");
  var version = document.getElementById("id_dataset_version");
  var dataScript = document.getElementById("label-editor-data");
  if (!textarea || !schema || !version || !dataScript) return;
  var data = JSON.parse(dataScript.textContent);
  var wrap = textarea.closest(".field");

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function versionLabels() { return (data.labels[version.value] || []).slice(); }

  var typed = textarea.value.split("\n").map(function (line) { return line.trim(); }).filter(Boolean);
  var labels = typed.length ? typed : versionLabels();
  var edited = typed.length > 0;  // once edited, choosing another version keeps the list

  var box = el("fieldset", { "class": "label-editor", "data-testid": "label-editor" });
  box.append(el("legend", {}, "Labels"));
  var note = el("p", { "class": "help", "data-testid": "label-note", "aria-live": "polite" });
  var list = el("ol", { "class": "label-list", "data-testid": "label-list" });
  var adder = el("div", { "class": "actions" });
  var newLabel = el("input", { type: "text", maxlength: "100", "aria-label": "New label", placeholder: "New label" });
  var addButton = el("button", { type: "button" }, "Add label");
  var reset = el("button", { type: "button" }, "Use the version's labels");
  adder.append(newLabel, addButton, reset);
  box.append(note, list, adder);
  textarea.hidden = true;
  wrap.querySelector("label[for=id_labels]").hidden = true;
  textarea.after(box);

  function save() { textarea.value = labels.join("\n"); }

  function draw(focusAt) {
    list.replaceChildren();
    labels.forEach(function (label, index) {
      var key = data.hotkeys[index];
      var row = el("li", { "data-testid": "label-row" });
      var input = el("input", { type: "text", maxlength: "100", "aria-label": "Label " + (index + 1) });
      input.value = label;
      input.addEventListener("input", function () { labels[index] = input.value; edited = true; save(); });
      var remove = el("button", { type: "button", "class": "link", "aria-label": "Remove " + label }, "remove");
      remove.addEventListener("click", function () {
        labels.splice(index, 1);
        edited = true;
        save();
        draw(Math.min(index, labels.length - 1));
      });
      row.append(input, el("span", { "class": "muted", "data-testid": "label-key" },
                           key ? " key " + Workbench.keyName(key) + " " : " no key "), remove);
      list.append(row);
    });
    note.textContent = labels.length ? "" : "No labels yet: add the labels to classify into.";
    if (focusAt !== undefined && focusAt >= 0) list.querySelectorAll("input")[focusAt].focus();
    save();
  }

  function add() {
    var value = newLabel.value.trim();
    if (!value) return;
    if (labels.indexOf(value) >= 0) { note.textContent = "“" + value + "” is already listed."; return; }
    labels.push(value);
    edited = true;
    newLabel.value = "";
    draw();
    newLabel.focus();
  }
  addButton.addEventListener("click", add);
  newLabel.addEventListener("keydown", function (event) {
    if (event.key === "Enter") { event.preventDefault(); add(); }  // adds; it does not send the form
  });
  reset.addEventListener("click", function () { labels = versionLabels(); edited = false; draw(); });
  version.addEventListener("change", function () { if (!edited) { labels = versionLabels(); draw(); } });

  function showForClassify() { wrap.hidden = schema.value !== "preset:classify"; }
  schema.addEventListener("change", showForClassify);
  showForClassify();
  draw();
})();
