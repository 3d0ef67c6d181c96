// Rating outputs blind on a pointwise judge's rubric: ask the API for the next output (the prompt
// and the output, no model), score each criterion, save, and go on to the next without a reload.
// The same for a dataset version's responses (a row's prompt and response, in the run's columns).
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=rate]");
  if (!box || !box.dataset.judge) return;
  var judgeSelect = box.querySelector("[data-testid=rate-judge]");
  if (judgeSelect) judgeSelect.addEventListener("change", function () { judgeSelect.form.submit(); });
  var judgeApi = "/api/projects/" + box.dataset.project + "/judges/" + box.dataset.judge;
  var rows = Boolean(box.dataset.version);
  var columns = { prompt_column: box.dataset.promptColumn, response_column: box.dataset.responseColumn };
  var api = rows ? judgeApi + "/versions/" + box.dataset.version + "/ratings/"
                 : judgeApi + "/comparisons/" + box.dataset.comparison + "/ratings/";
  var nextUrl = api + "next/" + (rows ? "?" + new URLSearchParams(columns).toString() : "");
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
  var form = box.querySelector("[data-testid=rate-form]");
  var output = null, busy = false;

  function show(data) {
    field("progress").textContent = data.rated + " rated · " + data.remaining + " left";
    output = rows ? data.row : data.output;
    form.reset();
    field("item").hidden = !output;
    field("done").hidden = Boolean(output);
    if (!output) return;
    // Markdown as the server rendered it (raw HTML in a prompt or an output is shown as text there).
    field("prompt").innerHTML = output.prompt_html;
    field("output").innerHTML = output.text_html;
  }

  function next() {
    return Workbench.apiFetch("GET", nextUrl).then(Workbench.answered).then(show).catch(function (error) {
      field("error").textContent = error.message;
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (!output || busy) return;
    busy = true;
    field("error").textContent = "";
    var answer = {};
    form.querySelectorAll("fieldset[data-criterion]").forEach(function (set) {
      var name = set.dataset.criterion;
      var score = form.elements[name].value;
      answer[name] = { score: set.dataset.scale === "1-5" ? Number(score) : score,
                       reason: form.elements[name + "-reason"].value };
    });
    var target = rows ? { position: output.position, prompt_column: columns.prompt_column,
                          response_column: columns.response_column } : { output: output.id };
    target.answer = answer;
    Workbench.apiFetch("POST", api, target).then(Workbench.answered).then(function (rating) {
      // What was saved, as text (a reason is never read as HTML).
      field("saved").textContent = "Saved: " + Object.keys(rating.answer).map(function (name) {
        var given = rating.answer[name];
        return name + " " + given.score + (given.reason ? " (" + given.reason + ")" : "");
      }).join(", ");
      return next();
    }).catch(function (error) {
      field("error").textContent = error.message;
    }).then(function () { busy = false; });
  });

  next();
})();
