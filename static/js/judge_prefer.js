// Choosing blind between a dataset version's row's two responses for a pairwise judge: ask the API
// for the next row (its prompt, and the two responses as A and B in an order of this person's own),
// choose with the keyboard (a, b, t) or the buttons, and go on to the next without a reload.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=prefer]");
  if (!box || !box.querySelector("[data-field=pair]")) return;
  var columns = { prompt_column: box.dataset.promptColumn, response_column: box.dataset.responseColumn,
                  second_response_column: box.dataset.secondResponseColumn };
  var api = "/api/projects/" + box.dataset.project + "/judges/" + box.dataset.judge + "/versions/" +
            box.dataset.version + "/preferences/";
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
  var KEYS = { a: "a", b: "b", t: "tie" };
  var row = null, busy = false;

  function show(data) {
    field("progress").textContent = data.chosen + " chosen · " + data.remaining + " left";
    row = data.row;
    field("pair").hidden = !row;
    field("done").hidden = Boolean(row);
    if (!row) return;
    // Markdown as the server rendered it (raw HTML in a prompt or a response is shown as text there).
    field("prompt").innerHTML = row.prompt_html;
    field("a").innerHTML = row.a_html;
    field("b").innerHTML = row.b_html;
  }

  function next() {
    return Workbench.apiFetch("GET", api + "next/?" + new URLSearchParams(columns).toString()).then(Workbench.answered)
      .then(show);
  }

  function choose(choice) {
    if (!row || busy) return;
    busy = true;
    field("error").textContent = "";
    var body = Object.assign({ position: row.position, choice: choice }, columns);
    Workbench.apiFetch("POST", api, body).then(Workbench.answered).then(next).catch(function (error) {
      field("error").textContent = error.message;
    }).then(function () { busy = false; });
  }

  box.querySelectorAll("[data-choice]").forEach(function (button) {
    button.addEventListener("click", function () { choose(button.dataset.choice); });
  });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT")) return;
    var choice = KEYS[event.key];
    if (choice) {
      event.preventDefault();
      choose(choice);
    }
  });
  next().catch(function (error) { field("error").textContent = error.message; });
})();
