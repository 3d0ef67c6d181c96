// Blind voting: ask the API for the next pair (prompt, A = left, B = right; no model names),
// vote with the keyboard or the buttons, see the models revealed, go on without a reload.
// Each vote carries an id made here, so a retried request never counts twice.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=vote]");
  if (!box) return;
  var api = box.dataset.api;
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
  var pair = null, voted = false, busy = false;
  var KEYS = { "1": "a", "ArrowLeft": "a", "2": "b", "ArrowRight": "b", "3": "tie", "t": "tie", "4": "both_bad",
               "x": "both_bad" };
  var LABELS = { a: "A is better", b: "B is better", tie: "Tie", both_bad: "Both bad" };

  function post(path, body) {
    return Workbench.apiFetch("POST", api + path, body || {}).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) throw new Error(data.detail || ("The server answered " + response.status + "."));
        return data;
      });
    });
  }

  var counts = { voted: 0, remaining: 0 };

  function progress(data) {
    counts = { voted: data.voted, remaining: data.remaining };
    field("progress").textContent = counts.voted + " voted · " + counts.remaining + " left";
  }

  function show(data) {
    progress(data);
    pair = data.pair;
    voted = false;
    field("result").textContent = "";
    field("error").textContent = "";
    field("next").hidden = true;
    box.querySelectorAll(".answer").forEach(function (a) { a.classList.remove("chosen"); });
    if (!pair) {
      field("pair").hidden = true;
      field("done").hidden = false;
      return;
    }
    field("done").hidden = true;
    field("pair").hidden = false;
    // Markdown as the server rendered it (raw HTML in a model's answer is shown as text there).
    field("prompt").innerHTML = pair.prompt_html;
    field("a").innerHTML = pair.a_html;
    field("b").innerHTML = pair.b_html;
    field("model-a").textContent = "";
    field("model-b").textContent = "";
    pair.clientId = Workbench.uuid();  // one per pair: a retry of this vote resends it
  }

  function next() {
    if (busy) return;
    busy = true;
    post("pairs/next/").then(show).catch(function (error) {
      field("error").textContent = error.message;
    }).then(function () { busy = false; });
  }

  function vote(choice) {
    if (!pair || voted || busy) return;
    busy = true;
    field("error").textContent = "";
    post("votes/", { pair: pair.id, choice: choice, client_id: pair.clientId }).then(function (data) {
      voted = true;
      // The vote counts at once, not only when the next pair comes.
      progress({ voted: counts.voted + 1, remaining: Math.max(counts.remaining - 1, 0) });
      field("model-a").textContent = "Model: " + data.a.name;
      field("model-b").textContent = "Model: " + data.b.name;
      if (data.choice === "a" || data.choice === "b") {
        box.querySelectorAll(".answer")[data.choice === "a" ? 0 : 1].classList.add("chosen");
      }
      field("result").textContent = "You voted: " + LABELS[data.choice] + ". A was " + data.a.name + ", B was " +
        data.b.name + ".";
      field("next").hidden = false;
      field("next").focus();
    }).catch(function (error) {
      field("error").textContent = error.message + " Press the key again to retry.";
    }).then(function () { busy = false; });
  }

  box.querySelectorAll("[data-choice]").forEach(function (button) {
    button.addEventListener("click", function () { vote(button.dataset.choice); });
  });
  field("next").addEventListener("click", next);
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT")) return;
    if (voted && (event.key === "Enter" || event.key === " " || event.key === "n")) {
      event.preventDefault();
      next();
      return;
    }
    var choice = KEYS[event.key];
    if (choice && !voted) {
      event.preventDefault();
      vote(choice);
    }
  });
  next();
})();
