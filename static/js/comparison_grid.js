// The comparison grid, live: cells arrive over the comparison's websocket (the backlog from
// the database on connect, then each batch as the worker finishes it), keyed by
// (prompt, contestant) so a cell that arrives twice is drawn once. Model output is shown as the
// server rendered its Markdown (raw HTML in it stays text); the word diff against a chosen column
// (Workbench.wordDiff, app.js) is built from text nodes. The per-model summaries are the
// server's, sent with each batch. Rows sort and filter by a metric.
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
    node.classList.remove("markdown");
    var against = diffAgainst && diffAgainst.value;
    var base = against && cells[cell.prompt + "-" + against];
    if (cell.error) { node.textContent = "Error: " + cell.error; return; }
    if (!against || String(cell.contestant) === against || !base || base.error) {
      if (cell.html === undefined) { node.textContent = cell.text; return; }  // sent before html was
      node.innerHTML = cell.html;
      node.classList.add("markdown");
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

  // The server's summary of each model (models_summaries in apps/comparison/selectors.py).
  function showSummaries(summaries) {
    summaries.forEach(function (s) {
      var td = document.querySelector("[data-summary='" + s.contestant + "']");
      if (!td) return;
      var parts = [s.cells + " outputs" + (s.errors ? ", " + s.errors + " failed" : "")];
      if (s.mean_latency_s !== null) parts.push(s.mean_latency_s.toFixed(2) + " s");
      if (s.mean_tokens_per_s !== null) parts.push(s.mean_tokens_per_s.toFixed(1) + " tok/s");
      if (s.exact_match !== null) parts.push("exact match " + s.exact_match.toFixed(2), "ROUGE-L " + s.rouge_l.toFixed(3));
      if (s.perplexity !== null) parts.push("ppl " + s.perplexity.toFixed(2));
      td.textContent = parts.join(" · ");
    });
  }

  // Sorting and filtering the rows: by a metric of one model's output, and to the rows where
  // the models' answers differ or one failed.
  var sortBy = document.getElementById("grid-sort"), sortModel = document.getElementById("grid-sort-model"),
      show = document.getElementById("grid-show");
  var METRICS = {
    rouge_l: function (c) { return c.scores && c.scores.rouge_l; },
    exact_match: function (c) { return c.scores && c.scores.exact_match; },
    perplexity: function (c) { return c.scores && c.scores.perplexity; },
    latency_s: function (c) { return c.latency_s; },
    completion_tokens: function (c) { return c.completion_tokens; },
  };

  function rowCells(row) {
    return Array.prototype.map.call(row.querySelectorAll("[data-cell]"), function (td) { return cells[td.dataset.cell]; });
  }

  function arrangeRows() {
    if (!sortBy) return;
    var body = box.ownerDocument.querySelector("[data-testid=grid] tbody");
    var rows = Array.prototype.slice.call(body.rows);
    var metric = METRICS[sortBy.value.replace(/-(asc|desc)$/, "")], descending = /-desc$/.test(sortBy.value);
    var value = function (row) {
      var cell = metric && cells[row.dataset.prompt + "-" + sortModel.value];
      var v = cell && !cell.error ? metric(cell) : undefined;
      return v === undefined || v === null ? null : v;
    };
    rows.sort(function (a, b) {
      if (!metric) return a.dataset.position - b.dataset.position;
      var x = value(a), y = value(b);
      if (x === null || y === null) return (x === null) - (y === null) || a.dataset.position - b.dataset.position;
      return (descending ? y - x : x - y) || a.dataset.position - b.dataset.position;
    });
    rows.forEach(function (row) {
      var present = rowCells(row).filter(Boolean);
      var texts = present.filter(function (c) { return !c.error; }).map(function (c) { return c.text.trim(); });
      var keep = show.value === "all" ||
        (show.value === "differ" && texts.length > 1 && texts.some(function (t) { return t !== texts[0]; })) ||
        (show.value === "failed" && present.some(function (c) { return c.error; }));
      row.hidden = !keep;
      body.appendChild(row);
    });
    document.querySelector("[data-testid=grid-shown]").textContent = rows.filter(function (r) { return !r.hidden; }).length + " of " + rows.length + " prompts";
  }

  [sortBy, sortModel, show].forEach(function (control) { if (control) control.addEventListener("change", arrangeRows); });

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
    arrangeRows();
  }

  if (diffAgainst) diffAgainst.addEventListener("change", redrawAll);

  function connect() {
    var live = field("live");
    window.liveSocket(box.dataset.socket, {
      message: function (data) {
        if (data.type === "state") renderState(data.comparison);
        else if (data.type === "cells") addCells(data.cells);
        else if (data.type === "summaries") showSummaries(data.summaries);
        else if (data.type === "live") live.hidden = false;
      },
      closed: function () { live.hidden = true; }
    });
  }
  connect();
})();
