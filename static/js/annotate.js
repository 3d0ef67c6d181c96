// The annotator's page: one item at a time from the campaign's queue, keyboard first, no reload.
// Keys: label hotkeys (1-9, then free letters, then those with Shift, unless the form names
// others: apps/annotation/schema.py HOTKEYS), a/b/… pick a response, t tie, x both
// bad, Ctrl+Enter submits, S skips, Backspace or ← goes back to fix the previous answer, ? lists
// the shortcuts. Every submission carries a client id made when the item is shown, so a retry
// after a network error never counts twice. Drafts autosave. Example text arrives as HTML the
// server rendered from Markdown with raw HTML escaped; everything else is set as text.
(function () {
  "use strict";
  var root = document.querySelector("[data-testid=annotate]");
  if (!root) return;
  var api = "/api/campaigns/" + root.dataset.campaign;
  var fields = JSON.parse(document.getElementById("schema-fields").textContent);
  // A reviewer correcting one annotator's answer: that item only, saved as the review's correction.
  var correctingScript = document.getElementById("correcting");
  var correcting = correctingScript ? JSON.parse(correctingScript.textContent) : null;
  var csrf = document.querySelector("meta[name=csrf-token]").getAttribute("content");
  var $ = function (id) { return root.querySelector("[data-testid=" + id + "]"); };
  var form = $("answer-form"), fieldBox = $("fields"), errorBox = $("error"), comment = document.getElementById("annotation-comment");
  var dialog = document.querySelector("[data-testid=shortcuts]");
  var state = { item: null, editing: null, clientId: null, shownAt: 0, history: null, back: -1, busy: false, draftTimer: null };
  var LETTERS = "abcdefgh";

  function uuid() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return "10000000-1000-4000-8000-100000000000".replace(/[018]/g, function (c) {
      return (c ^ (crypto.getRandomValues(new Uint8Array(1))[0] & (15 >> (c / 4)))).toString(16);
    });
  }

  function call(method, url, body, attempt) {
    attempt = attempt || 0;
    return fetch(url, {
      method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": csrf },
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (response) {
      if (response.status === 204) return { status: 204, data: null };
      return response.json().then(function (data) { return { status: response.status, data: data }; });
    }, function (error) {
      // The network failed: the same request (same client id) again, a few times.
      if (attempt >= 3) throw error;
      return new Promise(function (resolve) { setTimeout(resolve, 500 * Math.pow(2, attempt)); })
        .then(function () { return call(method, url, body, attempt + 1); });
    });
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  // Server-rendered, sanitised HTML (markdown-it with raw HTML escaped).
  function safeHtml(tag, html, cls) { var node = el(tag, { "class": cls || "example-text" }); node.innerHTML = html || ""; return node; }

  function say(text) { $("status").textContent = text || ""; }

  // Each item brings my count; the campaign's (a count over all its answers, everyone's) comes
  // from the campaign's socket, as on its dashboard: on connect and after anyone answers. Counting
  // it here every few of my own submissions left it stale while others worked.
  var campaignProgress = null;
  function showProgress(progress) {
    if (!progress) return;
    if (progress.annotations_needed !== undefined) campaignProgress = progress;
    $("progress").dataset.mine = progress.mine;
    $("progress").textContent = "Mine: " + progress.mine + (campaignProgress ? " · campaign: " +
      campaignProgress.annotations + " / " + campaignProgress.annotations_needed + " annotations" : "");
  }
  function refreshCampaign() {
    return call("GET", api + "/").then(function (c) { if (c.status === 200) showProgress(c.data.progress); });
  }
  if (!correcting) window.liveSocket("/ws/campaigns/" + root.dataset.campaign + "/", {
    message: function (data) {
      if (data.progress) {
        campaignProgress = data.progress;
        showProgress({ mine: $("progress").dataset.mine || 0 });
      }
      return true;
    }
  });

  // --- keys ----------------------------------------------------------------------------------
  // A capital letter is typed with Shift: the page says so.
  function keyName(key) { return /^[A-Z]$/.test(key) ? "Shift+" + key : key; }
  var keymap = {};
  fields.forEach(function (field) {
    (field.type === "single_label" || field.type === "multi_label" ? field.labels : []).forEach(function (label) {
      if (label.hotkey) keymap[label.hotkey] = { field: field, value: label.value };
    });
  });
  var preference = fields.filter(function (f) { return f.type === "preference"; })[0];
  if (preference) {
    preference.candidates.forEach(function (_, i) { keymap[LETTERS[i]] = { field: preference, value: LETTERS[i].toUpperCase() }; });
    keymap.t = { field: preference, value: "tie" };
    keymap.x = { field: preference, value: "both_bad" };
  }
  var ranking = fields.filter(function (f) { return f.type === "ranking"; })[0];
  if (ranking && !preference) {  // the letters are free: they rank
    ranking.candidates.forEach(function (_, i) { keymap[LETTERS[i]] = { field: ranking, value: LETTERS[i].toUpperCase() }; });
  }
  var list = dialog.querySelector("[data-testid=shortcut-list]");
  Object.keys(keymap).forEach(function (key) {
    list.append(el("li", {}, keyName(key) + " — " + keymap[key].field.name + ": " + keymap[key].value));
  });
  [["Ctrl+Enter", "submit"], ["S", "skip"], ["Backspace or ←", "previous item (fix it)"], ["?", "these shortcuts"]]
    .forEach(function (pair) { list.append(el("li", {}, pair[0] + " — " + pair[1])); });

  function press(binding) {
    if (binding.field.type === "ranking") {
      fieldBox.querySelector("[data-field='" + binding.field.name + "']").rank(binding.value);
      return;
    }
    var inputs = fieldBox.querySelectorAll("[name='" + binding.field.name + "']");
    inputs.forEach(function (input) {
      if (input.value !== binding.value) return;
      input.checked = input.type === "checkbox" ? !input.checked : true;
      input.dispatchEvent(new Event("change", { bubbles: true }));
    });
  }

  document.addEventListener("keydown", function (event) {
    if (dialog.open) return;
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); submit(); return; }
    var target = event.target;
    var typing = target.tagName === "TEXTAREA" || target.tagName === "SELECT" ||
      (target.tagName === "INPUT" && !/^(radio|checkbox)$/.test(target.type));
    if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "?") { event.preventDefault(); dialog.showModal(); return; }
    if (event.key === "Backspace" || event.key === "ArrowLeft") { event.preventDefault(); back(); return; }
    if (!state.item) return;
    if (event.key === "s" || event.key === "S") { event.preventDefault(); skip(); return; }
    var binding = keymap[event.key];
    if (binding) { event.preventDefault(); press(binding); }
  });
  $("help-button").addEventListener("click", function () { dialog.showModal(); });

  // --- the example ---------------------------------------------------------------------------
  function renderExample(example) {
    var box = $("example");
    box.replaceChildren();
    var html = example.html;
    if (html.messages && html.messages.length) {
      html.messages.forEach(function (message) {
        var turn = el("div", { "class": "chat-turn chat-" + message.role });
        turn.append(el("strong", {}, message.role));
        turn.append(safeHtml("div", message.html));
        box.append(turn);
      });
    } else if (html.prompt !== null) {
      box.append(el("h2", { "class": "h3" }, "Prompt"), safeHtml("div", html.prompt));
    }
    // The responses a preference or ranking field compares, once per distinct set of candidates.
    var shown = {};
    var compared = fields.filter(function (f) {
      var key = (f.candidates || []).join("|");
      if ((f.type !== "preference" && f.type !== "ranking") || shown[key]) return false;
      return (shown[key] = true);
    });
    compared.forEach(function (field) {
      var grid = el("div", { "class": "grid two candidates", "data-testid": "candidates-" + field.name });
      example.candidates[field.name].forEach(function (candidate) {
        var column = el("div", { "class": "candidate", "data-testid": "candidate-" + candidate.key });
        column.append(el("h3", { "class": "h3" }, "Response " + candidate.key));
        column.append(safeHtml("div", candidate.html));
        grid.append(column);
      });
      box.append(grid);
    });
    if (!compared.length && html.response !== null) {
      box.append(el("h2", { "class": "h3" }, "Response"), safeHtml("div", html.response));
    }
  }

  // --- the form ------------------------------------------------------------------------------
  function choice(field, type, value, text, checked) {
    var id = "f-" + field.name + "-" + String(value).replace(/\W/g, "_");
    var wrap = el("label", { "class": "choice", "for": id });
    var input = el("input", { type: type, name: field.name, id: id, value: String(value) });
    input.checked = !!checked;
    wrap.append(input, document.createTextNode(" " + text));
    return wrap;
  }

  function wordDiff(before, after) {
    var a = before.split(/(\s+)/), b = after.split(/(\s+)/), out = el("div", { "class": "diff", "data-testid": "diff" });
    if (a.length * b.length > 4e6) { out.textContent = "(too long to show a diff)"; return out; }
    var lcs = [];
    for (var i = a.length; i >= 0; i--) {
      lcs[i] = [];
      for (var j = b.length; j >= 0; j--) {
        lcs[i][j] = i === a.length || j === b.length ? 0 :
          a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    i = 0; j = 0;
    while (i < a.length || j < b.length) {
      if (i < a.length && j < b.length && a[i] === b[j]) { out.append(document.createTextNode(a[i])); i++; j++; }
      else if (j < b.length && (i === a.length || lcs[i][j + 1] >= lcs[i + 1][j])) { out.append(el("ins", {}, b[j])); j++; }
      else { out.append(el("del", {}, a[i])); i++; }
    }
    return out;
  }

  // `prefilled`: the model's answers that fill the fields (none once a draft or an answer exists);
  // `suggested`: all of them, what a text field's diff is shown against whatever fills it.
  function renderFields(values, prefilled, suggested, example) {
    fieldBox.replaceChildren();
    fields.forEach(function (field) {
      var set = el("fieldset", { "class": "field", "data-field": field.name });
      set.append(el("legend", {}, field.name.replace(/_/g, " ") + (field.required ? " *" : "")));
      if (field.description) set.append(el("p", { "class": "help" }, field.description));
      var value = values[field.name], suggestion = suggested[field.name];
      if (value === undefined && prefilled[field.name] !== undefined && field.type !== "text") value = prefilled[field.name];
      if (field.type === "single_label" || field.type === "multi_label") {
        field.labels.forEach(function (label) {
          var on = field.type === "single_label" ? value === label.value : (value || []).indexOf(label.value) >= 0;
          set.append(choice(field, field.type === "single_label" ? "radio" : "checkbox", label.value,
            (label.hotkey ? "[" + keyName(label.hotkey) + "] " : "") + label.value, on));
        });
      } else if (field.type === "rating") {
        for (var n = field.min; n <= field.max; n++) {
          set.append(choice(field, "radio", n, String(n) + (field.scale[String(n)] ? " — " + field.scale[String(n)] : ""), value === n));
        }
      } else if (field.type === "preference") {
        field.candidates.forEach(function (_, i) {
          var key = LETTERS[i].toUpperCase();
          set.append(choice(field, "radio", key, "[" + LETTERS[i] + "] " + key + " is better", value === key));
        });
        set.append(choice(field, "radio", "tie", "[t] tie", value === "tie"));
        set.append(choice(field, "radio", "both_bad", "[x] both bad", value === "both_bad"));
      } else if (field.type === "ranking") {
        renderRanking(set, field, value);
      } else if (field.type === "text") {
        var original = field.prefill === "response" ? example.response : field.prefill === "suggestion" ? suggestion : "";
        var area = el("textarea", { name: field.name, rows: "5", maxlength: String(field.max_length),
                                    "aria-label": field.name });
        area.value = value !== undefined ? value : (original || "");
        set.append(area);
        if (original) {
          var diffBox = el("div", { "class": "diff-box" });
          var showDiff = function () { diffBox.replaceChildren(wordDiff(original, area.value)); };
          area.addEventListener("input", showDiff);
          showDiff();
          set.append(el("p", { "class": "help" }, "Changes from the " + field.prefill + ":"), diffBox);
        }
      } else if (field.type === "spans") {
        renderSpans(set, field, example, value || []);
      }
      fieldBox.append(set);
    });
  }

  // Ranking: pick the candidates best first (buttons, or their letter keys); picking a ranked one
  // again takes it and those after it back. Hidden inputs hold the order for collect().
  function renderRanking(set, field, value) {
    var names = field.candidates.map(function (_, i) { return LETTERS[i].toUpperCase(); });
    set.ranking = (value || []).filter(function (name) { return names.indexOf(name) >= 0; });
    var order = el("ol", { "class": "ranking", "aria-live": "polite", "data-testid": "ranking-" + field.name });
    var hidden = names.map(function () { return el("input", { type: "hidden", name: field.name }); });
    var buttons = names.map(function (name) {
      var button = el("button", { type: "button", "aria-label": "rank " + name + " next" }, name);
      button.addEventListener("click", function () { set.rank(name); });
      return button;
    });
    function draw() {
      order.replaceChildren();
      set.ranking.forEach(function (name, place) { order.append(el("li", {}, (place === 0 ? "best: " : "") + name)); });
      hidden.forEach(function (input, place) { input.value = set.ranking[place] || ""; });
      buttons.forEach(function (button, i) { button.setAttribute("aria-pressed", String(set.ranking.indexOf(names[i]) >= 0)); });
    }
    set.rank = function (name) {
      var at = set.ranking.indexOf(name);
      if (at >= 0) set.ranking = set.ranking.slice(0, at); else set.ranking.push(name);
      draw();
      saveDraftSoon();
    };
    set.append(el("p", { "class": "help" }, "Pick the best first" + (preference ? "." : " (keys " +
      names.join(", ").toLowerCase() + ").")));
    buttons.forEach(function (button) { set.append(button); });
    set.append(order);
    hidden.forEach(function (input) { set.append(input); });
    draw();
  }

  // Spans: select text in the source and press a label's button; the source shows each span
  // highlighted with its label, and the list below can remove one. Offsets count characters of
  // the source text (code points, as the server counts them: an emoji is one), whatever
  // highlights the selection crosses.
  function renderSpans(set, field, example, spans) {
    var chars = Array.from(example[field.source] || "");
    var slice = function (start, end) { return chars.slice(start, end).join(""); };
    var source = el("div", { "class": "span-source", "data-testid": "span-source-" + field.name });
    var listBox = el("ul", { "class": "spans" });
    set.spans = spans.slice();
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
        remove.addEventListener("click", function () { set.spans.splice(index, 1); draw(); saveDraftSoon(); });
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
          say("Select text in the " + field.source + " first.");
          return;
        }
        var start = offset(range.startContainer, range.startOffset), end = offset(range.endContainer, range.endOffset);
        if (end > start) { set.spans.push({ start: start, end: end, label: label.value }); draw(); saveDraftSoon(); }
        selection.removeAllRanges();
      });
      set.append(button);
    });
    set.append(listBox);
    draw();
  }

  function collect() {
    var values = {};
    fields.forEach(function (field) {
      var set = fieldBox.querySelector("[data-field='" + field.name + "']");
      var inputs = Array.prototype.slice.call(set.querySelectorAll("[name='" + field.name + "']"));
      if (field.type === "single_label" || field.type === "preference") {
        var on = inputs.filter(function (i) { return i.checked; })[0];
        if (on) values[field.name] = on.value;
      } else if (field.type === "rating") {
        var picked = inputs.filter(function (i) { return i.checked; })[0];
        if (picked) values[field.name] = parseInt(picked.value, 10);
      } else if (field.type === "multi_label") {
        var all = inputs.filter(function (i) { return i.checked; }).map(function (i) { return i.value; });
        if (all.length) values[field.name] = all;
      } else if (field.type === "ranking") {
        var order = inputs.map(function (i) { return i.value; });
        if (order.every(Boolean)) values[field.name] = order;
      } else if (field.type === "text") {
        if (inputs[0].value !== "") values[field.name] = inputs[0].value;
      } else if (field.type === "spans") {
        if (set.spans.length) values[field.name] = set.spans;
      }
    });
    return values;
  }

  // --- drafts --------------------------------------------------------------------------------
  function saveDraftSoon() {
    if (!state.item || state.editing) return;
    clearTimeout(state.draftTimer);
    var item = state.item;
    state.draftTimer = setTimeout(function () {
      call("PUT", api + "/items/" + item.id + "/draft/", { values: collect(), comment: comment.value }).then(function (r) {
        if (r.status === 200 && state.item === item) say("Draft saved.");
      });
    }, 700);
  }
  form.addEventListener("change", saveDraftSoon);
  form.addEventListener("input", saveDraftSoon);

  // --- showing items -------------------------------------------------------------------------
  function show(item, editing) {
    state.item = item;
    state.editing = editing || null;
    state.clientId = uuid();
    state.shownAt = performance.now();
    errorBox.textContent = "";
    fieldBox.querySelectorAll("[aria-invalid]").forEach(function (n) { n.removeAttribute("aria-invalid"); });
    var source = editing ? { values: editing.values, comment: editing.comment } : (item.draft || { values: {}, comment: "" });
    // The suggestion stays with the item: after a reload (the draft fills the fields) and when
    // going back, its text is still what the diff compares with.
    var suggested = (item.suggestion && item.suggestion.values) || {};
    var prefilled = !editing && !item.draft ? suggested : {};
    renderExample(item.example);
    renderFields(source.values || {}, prefilled, suggested, item.example);
    comment.value = source.comment || "";
    $("item-title").textContent = "Example " + (item.position + 1) +
      (editing && editing.correcting ? " — correcting " + editing.annotator + "'s answer" :
       editing ? " — fixing your " + (editing.skipped ? "skipped item" : "answer") : "") +
      (!editing && Object.keys(suggested).length ? " — pre-filled by the model: check it" : "");
    $("item").hidden = false;
    $("done").hidden = true;
    var first = fieldBox.querySelector("input, textarea, select");
    if (first && first.tagName !== "TEXTAREA") first.focus({ preventScroll: true });
    else form.querySelector("[data-testid=submit]").focus({ preventScroll: true });
  }

  function next() {
    state.back = -1;
    state.history = null;
    return call("POST", api + "/next/").then(function (r) {
      if (r.status === 204) {
        state.item = null;
        $("item").hidden = true;
        $("done").hidden = false;
        return refreshCampaign();
      }
      if (r.status !== 200) { say(r.data.detail || "Could not load the next item."); return; }
      showProgress(r.data.progress);
      show(r.data);
    });
  }

  function markInvalid(field) {
    var name = (field || "").replace(/^values\./, "").replace(/[\[.].*$/, "");
    var set = fieldBox.querySelector("[data-field='" + name + "']");
    if (set) { set.setAttribute("aria-invalid", "true"); var input = set.querySelector("input:not([type=hidden]), textarea, select, button"); if (input) input.focus(); }
  }

  function submit() {
    if (!state.item || state.busy) return;
    state.busy = true;
    var body = { values: collect(), comment: comment.value };
    var done;
    if (state.editing && state.editing.correcting) {
      done = call("POST", "/api/annotations/" + state.editing.id + "/review/",
                  { decision: "correct", values: body.values, comment: body.comment });
    } else if (state.editing) {
      body.revision = state.editing.revision;
      done = call("PATCH", "/api/annotations/" + state.editing.id + "/", body);
    } else {
      body.client_id = state.clientId;
      body.time_spent_ms = Math.round(performance.now() - state.shownAt);
      done = call("POST", api + "/items/" + state.item.id + "/submit/", body);
    }
    done.then(function (r) {
      state.busy = false;
      if ((r.status === 200 || r.status === 201) && state.editing && state.editing.correcting) {
        say("Your correction is saved.");
        location.assign(correcting.back);
        return;
      }
      if (r.status === 200 || r.status === 201) {
        clearTimeout(state.draftTimer);
        say(state.editing ? "Your fix is saved." : "Saved.");
        if (r.data.progress) showProgress(r.data.progress);
        return next();
      }
      var detail = r.data.detail || JSON.stringify(r.data);
      errorBox.textContent = (r.data.field ? r.data.field + ": " : "") + detail;
      if (r.status === 409 && r.data.current) state.editing = r.data.current;  // the latest revision, to retry
      markInvalid(r.data.field);
    }, function () {
      state.busy = false;
      errorBox.textContent = "Could not reach the server; your answer is kept here — try again.";
    });
  }
  form.addEventListener("submit", function (event) { event.preventDefault(); submit(); });

  function skip() {
    if (!state.item || state.editing || state.busy) return;
    state.busy = true;
    call("POST", api + "/items/" + state.item.id + "/skip/", { client_id: state.clientId }).then(function (r) {
      state.busy = false;
      if (r.status === 200 || r.status === 201) { say("Skipped."); return next(); }
      errorBox.textContent = r.data.detail || "Could not skip.";
    });
  }
  $("skip").addEventListener("click", skip);

  function back() {
    if (correcting) return;
    var load = state.history ? Promise.resolve(state.history) : call("GET", api + "/mine/").then(function (r) {
      state.history = r.status === 200 ? r.data.results : [];
      return state.history;
    });
    load.then(function (history) {
      if (state.back + 1 >= history.length) { say("Nothing earlier to go back to."); return; }
      state.back += 1;
      var annotation = history[state.back];
      return call("GET", api + "/items/" + annotation.item + "/").then(function (r) {
        if (r.status !== 200) { say(r.data.detail || "Could not open that item."); return; }
        show(r.data, r.data.annotation);
        say("Going back: change your answer and submit, or press Backspace again.");
      });
    });
  }
  $("back").addEventListener("click", back);

  if (correcting) {
    $("skip").hidden = true;
    $("back").hidden = true;
    show(correcting.item, { id: correcting.annotation.id, annotator: correcting.annotation.annotator,
                            values: correcting.annotation.values, comment: correcting.annotation.comment,
                            correcting: true });
  } else {
    refreshCampaign().then(next);
  }
})();
