// The dataset version page's teacher runs: estimate what a run will take, launch it, and watch
// its progress (polled from the run's API while it is active) until its new version is linked.
(function () {
  "use strict";
  var root = document.querySelector("[data-testid=teacher]");
  if (!root) return;
  var api = "/api/projects/" + root.dataset.project + "/teacher-runs/";
  var form = root.querySelector("[data-testid=teacher-form]");
  var error = root.querySelector("[data-testid=teacher-error]");
  var launch = root.querySelector("[data-testid=teacher-launch]");

  function showError(body) {
    error.textContent = (body && (body.field ? body.field + ": " : "") + (body.detail || JSON.stringify(body))) || "Failed.";
    error.hidden = false;
  }

  function request() {
    var teacher = form.elements.teacher.value.split(":");
    var body = { version: Number(root.dataset.version), prompt_column: form.elements.prompt_column.value,
                 max_tokens: Number(form.elements.max_tokens.value),
                 temperature: Number(form.elements.temperature.value),
                 seed: form.elements.seed.value === "" ? null : Number(form.elements.seed.value) };
    body[teacher[0] === "provider" ? "provider_model" : "local_model"] = Number(teacher[1]);
    return body;
  }

  if (form) {
    root.querySelector("[data-testid=teacher-estimate]").addEventListener("click", function () {
      error.hidden = true;
      Workbench.apiFetch("POST", api + "estimate/", request()).then(function (response) {
        return response.json().then(function (data) {
          if (!response.ok) { showError(data); return; }
          root.querySelector("[data-testid=teacher-estimate-text]").textContent =
            data.rows + " rows, about " + data.prompt_tokens + " prompt tokens and at most " +
            data.max_completion_tokens + " answered" + (data.max_cost !== null ? ", at most " + data.max_cost + " in cost" : "");
          launch.hidden = false;
        });
      });
    });
    launch.addEventListener("click", function () {
      launch.disabled = true;
      error.hidden = true;
      Workbench.apiFetch("POST", api, request()).then(function (response) {
        return response.json().then(function (data) {
          if (response.ok) window.location.reload(); else { launch.disabled = false; showError(data); }
        });
      });
    });
  }

  function field(article, name) { return article.querySelector("[data-field=" + name + "]"); }

  function render(article, run) {
    article.dataset.state = run.state;
    field(article, "state").textContent = run.state;
    field(article, "done").textContent = run.rows_done;
    article.querySelector("progress").value = run.rows_done;
    field(article, "tokens").textContent = run.prompt_tokens + run.completion_tokens;
    if (run.cost !== null) { field(article, "cost").textContent = run.cost; field(article, "priced").hidden = false; }
    var active = run.state === "queued" || run.state === "running";
    if (field(article, "cancel")) field(article, "cancel").hidden = !active;
    field(article, "error").textContent = run.error;
    field(article, "error").hidden = !run.error;
    if (run.version_number) {
      var link = field(article, "version");
      link.href = "/projects/" + root.dataset.project + "/datasets/" + run.dataset + "/versions/" + run.version_number + "/";
      link.textContent = "version " + run.version_number;
      link.hidden = false;
    }
    return active;
  }

  root.querySelectorAll("[data-testid=teacher-run]").forEach(function (article) {
    var url = api + article.dataset.run + "/";
    var cancel = field(article, "cancel");
    if (cancel) cancel.addEventListener("click", function () {
      cancel.disabled = true;
      Workbench.apiFetch("POST", url + "cancel/").then(function (response) {
        return response.json().then(function (data) { if (response.ok) render(article, data); else showError(data); });
      });
    });
    function poll() {
      fetch(url, { credentials: "same-origin" }).then(function (response) { return response.json(); }).then(function (run) {
        if (render(article, run)) window.setTimeout(poll, 1000);
      });
    }
    if (article.dataset.state === "queued" || article.dataset.state === "running") poll();
  });
})();
