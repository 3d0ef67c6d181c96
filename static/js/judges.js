// Judges page: define a judge, estimate a run's cost, launch it (over the page's comparison, or over
// the dataset version and columns chosen in the form), watch its progress (polled from the run's API
// while it is active) and show its results and agreement with people.
(function () {
  "use strict";
  var root = document.querySelector("[data-testid=judges]");
  if (!root) return;
  var api = "/api/projects/" + root.dataset.project + "/";
  var comparison = Number(root.dataset.comparison);

  // What a run judges: the page's comparison, or the chosen version's rows read in the chosen columns.
  function source() {
    if (comparison) return { comparison: comparison };
    var field = function (name) { return root.querySelector("[data-testid=" + name + "]").value.trim(); };
    var body = { version: Number(field("launch-version")) || null, prompt_column: field("prompt-column"),
                 response_column: field("response-column") };
    var second = field("second-response-column");
    if (second) body.second_response_column = second;
    return body;
  }

  function showError(el, body) {
    el.textContent = (body && (body.field ? body.field + ": " : "") + (body.detail || JSON.stringify(body))) || "Failed.";
    el.hidden = false;
  }

  function criteriaFrom(text) {
    return text.split("\n").map(function (line) { return line.trim(); }).filter(Boolean).map(function (line) {
      var parts = line.split("|").map(function (p) { return p.trim(); });
      return { name: parts[0], scale: parts[1] || "1-5", description: parts.slice(2).join(" | ") };
    });
  }

  var form = document.querySelector("[data-testid=judge-form]");
  if (form) form.addEventListener("submit", function (event) {
    event.preventDefault();
    var error = form.querySelector("[data-testid=judge-error]");
    error.hidden = true;
    var model = form.elements.model.value.split(":");
    var body = { name: form.elements.name.value, max_tokens: Number(form.elements.max_tokens.value),
                 rubric: { kind: form.elements.kind.value, instructions: form.elements.instructions.value,
                           criteria: criteriaFrom(form.elements.criteria.value) } };
    body[model[0] === "provider" ? "provider_model" : "local_model"] = model[0] === "provider" ? model[1] : Number(model[1]);
    Workbench.apiFetch("POST", api + "judges/", body).then(function (response) {
      return response.json().then(function (data) {
        if (response.ok) window.location.reload(); else showError(error, data);
      });
    });
  });

  var estimate = document.querySelector("[data-testid=estimate]");
  var launch = document.querySelector("[data-testid=launch]");
  var judgeSelect = document.querySelector("[data-testid=launch-judge]");
  var launchError = document.querySelector("[data-testid=launch-error]");
  if (estimate) estimate.addEventListener("click", function () {
    launchError.hidden = true;
    Workbench.apiFetch("POST", api + "judges/" + judgeSelect.value + "/estimate/", source())
      .then(function (response) {
        return response.json().then(function (data) {
          if (!response.ok) { showError(launchError, data); return; }
          document.querySelector("[data-testid=estimate-text]").textContent =
            data.calls + " calls (" + data.items + " items), about " + data.prompt_tokens +
            " prompt tokens and at most " + data.max_completion_tokens + " answered";
          launch.hidden = false;
        });
      });
  });
  if (launch) launch.addEventListener("click", function () {
    launch.disabled = true;
    Workbench.apiFetch("POST", api + "judges/" + judgeSelect.value + "/runs/", source())
      .then(function (response) {
        return response.json().then(function (data) {
          if (response.ok) window.location.reload(); else { launch.disabled = false; showError(launchError, data); }
        });
      });
  });

  function pct(x) { return x === null || x === undefined ? "—" : (100 * x).toFixed(1) + "%"; }
  function cell(text) { var td = document.createElement("td"); td.textContent = text; return td; }
  function table(head, rows, testid) {
    var t = document.createElement("table");
    t.dataset.testid = testid;
    var tr = document.createElement("tr");
    head.forEach(function (h) { var th = document.createElement("th"); th.textContent = h; tr.appendChild(th); });
    t.appendChild(tr);
    rows.forEach(function (row) {
      var r = document.createElement("tr");
      row.forEach(function (v) { r.appendChild(cell(v)); });
      t.appendChild(r);
    });
    return t;
  }
  function line(text, testid) { var p = document.createElement("p"); p.textContent = text; p.dataset.testid = testid; return p; }

  function renderResults(el, run) {
    var s = run.summary;
    el.textContent = "";
    if (!s || !s.kind) return;
    var names = s.models || {};
    el.appendChild(line(s.calls + " calls, " + s.unparseable + " unparseable answers, " +
                        (s.prompt_tokens + s.completion_tokens) + " tokens", "judge-totals"));
    if (s.kind === "pairwise") {
      el.appendChild(line("Position consistency: " + pct(s.position_consistency) + " (" + s.consistent + " of " +
                          s.judged + " pairs agree in both orders); A picked in " + pct(s.a_rate) +
                          " of decisive answers", "position-consistency"));
      if (s.win_rate !== undefined) {
        el.appendChild(line("Win rate of " + names["0"] + " over " + names["1"] + ": " + pct(s.win_rate) +
                            " (a tie or an inconsistent pair counts half)", "win-rate"));
      }
      el.appendChild(table(["First", "Second", "First wins", "Second wins", "Ties", "Inconsistent", "Unparseable"],
        s.matchups.map(function (m) {
          return [names[m.first], names[m.second], m.first_wins, m.second_wins, m.ties, m.inconsistent, m.unparseable];
        }), "matchups"));
      var v = s.verbosity;
      el.appendChild(line("Verbosity: the longer response won " + v.longer_won + " of " + v.with_length_difference +
                          " decisive verdicts (" + pct(v.longer_won_rate) + "); mean length difference winner − loser " +
                          (v.mean_length_difference === null ? "—" : v.mean_length_difference + " characters"), "verbosity"));
    } else {
      var criteria = null;
      var rows = Object.keys(s.columns).map(function (col) {
        var c = s.columns[col];
        criteria = criteria || Object.keys(c.criteria);
        return [names[col], c.judged, c.unparseable].concat(criteria.map(function (name) {
          var x = c.criteria[name];
          return x.mean !== undefined ? (x.mean === null ? "—" : x.mean.toFixed(2)) : pct(x.pass_rate);
        }));
      });
      el.appendChild(table([comparison ? "Model" : "Column", "Judged", "Unparseable"].concat(criteria || []), rows, "scores"));
    }
    renderAgreement(el, run.agreement);
  }

  // Agreement with the blind votes on the same pairs, beside the voters' with each other, the
  // confusion of the people's labels against the judge's, and the project's calibration verdict.
  function renderAgreement(el, a) {
    if (!a) return;
    var k = function (f) {
      if (f.kappa === null) return "—";
      return f.kappa.toFixed(3) + (f.kappa_ci ? " [" + f.kappa_ci[0].toFixed(2) + ", " + f.kappa_ci[1].toFixed(2) + "]" : "");
    };
    // A pairwise run over a dataset version is set against people's choices between the row's two
    // responses, once someone chose; a pointwise one has no votes (judge_vs_people null), only ratings.
    var chosen = a.people === "chosen";
    if (chosen) {
      el.appendChild(line("People's choices: " + a.preferences + " choices on " + a.rows_with_preferences +
                          " rows by " + a.raters + (a.raters === 1 ? " person" : " people"), "preferences-totals"));
    }
    var shown = a.judge_vs_people && (!chosen || a.preferences > 0);
    if (shown) {
      el.appendChild(line((chosen ? "Agreement with people's choices" : "Agreement with blind votes") + ": κ " +
                          k(a.judge_vs_people) + ", " +
                          pct(a.judge_vs_people.agreement) + " over " + a.judge_vs_people.items +
                          " items · people with each other: κ " + k(a.people_vs_people) + ", " +
                          pct(a.people_vs_people.agreement) + " over " + a.people_vs_people.items + " items",
                          "agreement"));
    }
    renderRatings(el, a.ratings);
    var c = a.calibration;
    var verdict = line(c.calibrated ? "Calibrated (κ ≥ " + c.min_kappa + ", ρ ≥ " + c.min_correlation +
                                      " over at least " + c.min_items + " items)"
                                    : "Not calibrated: " + c.reason + ". It cannot gate anything.", "calibration");
    verdict.className = c.calibrated ? "badge ok" : "badge warn";
    verdict.dataset.calibrated = String(c.calibrated);
    el.appendChild(verdict);
    if (!shown) return;
    var confusion = a.judge_vs_people.confusion;
    el.appendChild(table(["People \\ judge"].concat(a.labels), a.labels.map(function (label) {
      return [label].concat(a.labels.map(function (other) { return confusion[label][other]; }));
    }), "confusion"));
  }

  // A pointwise judge's scores against people's ratings of the same outputs, per criterion,
  // beside the raters against each other: ρ, τ and MAE (1-5) or κ, TPR and TNR (pass/fail).
  var FIGURES = ["rho", "tau", "mae", "kappa", "tpr", "tnr"];
  function figure(f, name) {
    if (!(name in f)) return "";
    if (f[name] === null) return "—";
    return f[name].toFixed(3) + (f[name + "_ci"] ? " [" + f[name + "_ci"][0].toFixed(2) + ", " +
                                 f[name + "_ci"][1].toFixed(2) + "]" : "");
  }
  function renderRatings(el, r) {
    if (!r) return;
    el.appendChild(line("People's ratings: " + r.ratings + " ratings of " + r.outputs_rated + " outputs by " +
                        r.raters + " raters", "ratings-totals"));
    if (!r.ratings) return;
    var rows = [];
    r.criteria.forEach(function (c) {
      [["judge vs people", c.judge_vs_people], ["people vs people", c.people_vs_people]].forEach(function (side) {
        rows.push([c.name, side[0], side[1].items].concat(FIGURES.map(function (name) { return figure(side[1], name); })));
      });
    });
    el.appendChild(table(["Criterion", "Between", "n", "Spearman ρ", "Kendall τ", "MAE", "κ", "TPR", "TNR"], rows,
                         "ratings-agreement"));
  }

  document.querySelectorAll("[data-testid=judge-run]").forEach(function (article) {
    var url = api + "judge-runs/" + article.dataset.run + "/";
    var field = function (name) { return article.querySelector("[data-field=" + name + "]"); };
    var cancel = field("cancel");
    if (cancel) cancel.addEventListener("click", function () { Workbench.apiFetch("POST", url + "cancel/", {}); });
    function poll() {
      Workbench.apiFetch("GET", url).then(function (r) { return r.json(); }).then(function (run) {
        article.dataset.state = run.state;
        field("state").textContent = run.state;
        field("done").textContent = run.calls_done;
        field("total").textContent = run.calls_total;
        article.querySelector("progress").value = run.calls_done;
        article.querySelector("progress").max = run.calls_total;
        if (run.error) { field("error").textContent = run.error; field("error").hidden = false; }
        var active = run.state === "queued" || run.state === "running";
        if (cancel) cancel.hidden = !active;
        if (active) { setTimeout(poll, 1000); } else { renderResults(field("results"), run); }
      });
    }
    poll();
  });
})();
