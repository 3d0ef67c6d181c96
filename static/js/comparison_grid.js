// The comparison grid, live: cells arrive over the comparison's websocket (the backlog from
// the database on connect, then each batch as the worker finishes it), keyed by
// (prompt, contestant) so a cell that arrives twice is drawn once. Model output is always set
// as text (textContent), never as markup. The word diff against a chosen column
// (Workbench.wordDiff, app.js) is built from text nodes.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=comparison]");
  if (!box) return;
  var ended = ["succeeded", "failed", "cancelled"];
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
  var cells = {};  // "prompt-contestant" -> cell payload
  var diffAgainst = document.getElementById("diff-against");

  function key(cell) { return cell.prompt + "-" + cell.contestant; }

  function renderText(node, cell) {
    node.textContent = "";
    var against = diffAgainst && diffAgainst.value;
    var base = against && cells[cell.prompt + "-" + against];
    if (!against || String(cell.contestant) === against || !base || cell.error || base.error) {
      node.textContent = cell.error ? "Error: " + cell.error : cell.text;
      return;
    }
    var parts = Workbench.wordDiff(base.text, cell.text) || [{ op: "same", text: cell.text }];  // too long: plain
    parts.forEach(function (part) {
      if (part.op === "same") { node.appendChild(document.createTextNode(part.text)); return; }
      var mark = document.createElement(part.op);
      mark.className = "diff";
      mark.textContent = part.text;
      node.appendChild(mark);
    });
  }

  function meta(cell) {
    if (cell.error) return "failed";
    var parts = [];
    if (cell.latency_s !== null && cell.latency_s !== undefined) parts.push(cell.latency_s.toFixed(2) + " s");
    if (cell.tokens_per_s !== null && cell.tokens_per_s !== undefined) parts.push(cell.tokens_per_s.toFixed(1) + " tok/s");
    parts.push(cell.completion_tokens + " tokens");
    var s = cell.scores || {};
    if (s.exact_match !== undefined) parts.push("EM " + s.exact_match);
    if (s.rouge_l !== undefined) parts.push("ROUGE-L " + s.rouge_l.toFixed(3));
    if (s.perplexity !== undefined) parts.push("ppl " + s.perplexity.toFixed(2));
    return parts.join(" · ");
  }

  function draw(cell) {
    var td = box.ownerDocument.querySelector("[data-cell='" + key(cell) + "']");
    if (!td) return;
    td.classList.toggle("error", !!cell.error);
    td.dataset.filled = "true";
    renderText(td.querySelector("[data-field=text]"), cell);
    td.querySelector("[data-field=meta]").textContent = meta(cell);
  }

  function redrawAll() { Object.keys(cells).forEach(function (k) { draw(cells[k]); }); }

  // Per model: outputs, failures, mean latency and tokens/s, and with references the exact-match
  // rate, mean ROUGE-L and the perplexity of all references together (as the server computes it).
  function summarise() {
    var by = {};
    Object.keys(cells).forEach(function (k) {
      var c = cells[k];
      var s = by[c.contestant] || (by[c.contestant] = { n: 0, errors: 0, latency: [], speed: [], em: [], rouge: [],
                                                          nll: 0, tokens: 0 });
      s.n += 1;
      if (c.error) { s.errors += 1; return; }
      if (c.latency_s !== null && c.latency_s !== undefined) s.latency.push(c.latency_s);
      if (c.tokens_per_s !== null && c.tokens_per_s !== undefined) s.speed.push(c.tokens_per_s);
      var sc = c.scores || {};
      if (sc.exact_match !== undefined) { s.em.push(sc.exact_match); s.rouge.push(sc.rouge_l); }
      if (sc.reference_nll !== undefined) { s.nll += sc.reference_nll; s.tokens += sc.reference_tokens; }
    });
    var mean = function (xs) { return xs.reduce(function (a, b) { return a + b; }, 0) / xs.length; };
    Object.keys(by).forEach(function (contestant) {
      var td = document.querySelector("[data-summary='" + contestant + "']");
      if (!td) return;
      var s = by[contestant], parts = [s.n + " outputs" + (s.errors ? ", " + s.errors + " failed" : "")];
      if (s.latency.length) parts.push(mean(s.latency).toFixed(2) + " s");
      if (s.speed.length) parts.push(mean(s.speed).toFixed(1) + " tok/s");
      if (s.em.length) parts.push("exact match " + mean(s.em).toFixed(2), "ROUGE-L " + mean(s.rouge).toFixed(3));
      if (s.tokens) parts.push("ppl " + Math.exp(s.nll / s.tokens).toFixed(2));
      td.textContent = parts.join(" · ");
    });
  }

  function renderState(state) {
    field("state").textContent = state.state;
    field("done").textContent = state.cells_done;
    field("total").textContent = state.cells_total;
    field("error").textContent = state.error || "";
    var bar = box.querySelector("progress");
    bar.max = state.cells_total || 1;
    bar.value = state.cells_done;
    if (ended.indexOf(state.state) >= 0 && ended.indexOf(box.dataset.state) < 0) {
      box.dataset.state = state.state;
      var cancel = field("cancel");
      if (cancel) cancel.remove();
    }
  }

  function addCells(list) {
    list.forEach(function (cell) { cells[key(cell)] = cell; });
    if (diffAgainst && diffAgainst.value) { redrawAll(); } else { list.forEach(draw); }
    summarise();
  }

  if (diffAgainst) diffAgainst.addEventListener("change", redrawAll);

  function connect() {
    var live = field("live");
    window.liveSocket(box.dataset.socket, {
      message: function (data) {
        if (data.type === "state") renderState(data.comparison);
        else if (data.type === "cells") addCells(data.cells);
        else if (data.type === "live") live.hidden = false;
      },
      closed: function () { live.hidden = true; }
    });
  }
  connect();
})();
