// Eval suites page: create a suite, run it on a model, and watch the runs (the runs section is
// re-rendered from the server every second while one is queued or running).
(function () {
  "use strict";
  var root = document.querySelector("[data-testid=eval-suites]");
  if (!root) return;
  var api = "/api/projects/" + root.dataset.project + "/";

  function showError(el, body) {
    el.textContent = (body && (body.field ? body.field + ": " : "") + (body.detail || JSON.stringify(body))) || "Failed.";
    el.hidden = false;
  }

  var form = document.querySelector("[data-testid=suite-form]");
  if (form) form.addEventListener("submit", function (event) {
    event.preventDefault();
    var error = form.querySelector("[data-testid=suite-error]");
    error.hidden = true;
    var metrics = Array.prototype.filter.call(form.elements.metric ? form.querySelectorAll("[name=metric]") : [],
      function (box) { return box.checked; }).map(function (box) {
        var threshold = form.elements["threshold-" + box.value].value;
        return { metric: box.value, threshold: threshold === "" ? null : Number(threshold) };
      });
    // One threshold input per judged checkbox, in the same order.
    var thresholds = form.querySelectorAll("[name=threshold-judged]");
    form.querySelectorAll("[name=judged]").forEach(function (box, i) {
      if (!box.checked) return;
      var threshold = thresholds[i].value;
      var metric = { metric: box.value, judge: Number(box.dataset.judge), threshold: threshold === "" ? null : Number(threshold) };
      if (box.dataset.criterion) metric.criterion = box.dataset.criterion;
      metrics.push(metric);
    });
    var body = { name: form.elements.name.value, dataset_version: Number(form.elements.dataset_version.value),
                 split: form.elements.split.value, metrics: metrics, gate_alias: form.elements.gate_alias.value,
                 max_new_tokens: Number(form.elements.max_new_tokens.value), auto_run: form.elements.auto_run.checked,
                 baseline_model: form.elements.baseline_model.value ? Number(form.elements.baseline_model.value) : null };
    Workbench.apiFetch("POST", api + "eval-suites/", body).then(function (response) {
      return response.json().then(function (data) {
        if (response.ok) window.location.reload(); else showError(error, data);
      });
    });
  });

  function watch() {
    var runs = document.querySelector("[data-testid=eval-runs]");
    if (!runs || runs.dataset.active !== "true") return;
    setTimeout(function () {
      Workbench.refreshElement(runs, "[data-testid=eval-runs]").then(watch);
    }, 1000);
  }

  root.querySelectorAll("[data-testid=eval-suite]").forEach(function (suite) {
    var button = suite.querySelector("[data-field=run]");
    if (!button) return;
    button.addEventListener("click", function () {
      var error = suite.querySelector("[data-field=run-error]");
      error.hidden = true;
      button.disabled = true;
      Workbench.apiFetch("POST", api + "eval-suites/" + suite.dataset.suite + "/runs/",
                         { model: Number(suite.querySelector("[data-field=model]").value) })
        .then(function (response) {
          return response.json().then(function (data) {
            button.disabled = false;
            if (!response.ok) { showError(error, data); return; }
            var runs = document.querySelector("[data-testid=eval-runs]");
            Workbench.refreshElement(runs, "[data-testid=eval-runs]").then(watch);
          });
        });
    });
  });
  watch();
})();
