// The annotator's page: one item at a time from the campaign's queue, keyboard first, no reload.
// Keys: label hotkeys (1-9, then free letters, then those with Shift, unless the form names
// others: apps/annotation/field_types.py HOTKEYS), a/b/… pick a response, t tie, x both
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
  var $ = function (id) { return root.querySelector("[data-testid=" + id + "]"); };
  var form = $("answer-form"), fieldBox = $("fields"), errorBox = $("error"), comment = document.getElementById("annotation-comment");
  var dialog = document.querySelector("[data-testid=shortcuts]");
  var state = { item: null, editing: null, clientId: null, shownAt: 0, history: null, back: -1, busy: false, draftTimer: null };
  // One renderer per field type (static/js/annotation/fields/), the page's only knowledge of them.
  var renderers = window.annotationFields.renderers, el = window.annotationFields.el;

  var uuid = Workbench.uuid;

  function call(method, url, body, attempt) {
    attempt = attempt || 0;
    return Workbench.apiFetch(method, url, body).then(function (response) {
      if (response.status === 204) return { status: 204, data: null };
      return response.json().then(function (data) { return { status: response.status, data: data }; });
    }, function (error) {
      // The network failed: the same request (same client id) again, a few times.
      if (attempt >= 3) throw error;
      return new Promise(function (resolve) { setTimeout(resolve, 500 * Math.pow(2, attempt)); })
        .then(function () { return call(method, url, body, attempt + 1); });
    });
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
  // A field takes the keys its renderer names only when none of them is held yet (a second
  // preference gets no letters); spare keys (a ranking's letters) are handed out after all others.
  var keymap = {}, keysOf = {};
  function bind(field, kind) {
    var bindings = renderers[field.type][kind] ? renderers[field.type][kind](field) : [];
    if (bindings.some(function (binding) { return keymap[binding.key]; })) return;
    bindings.forEach(function (binding) {
      keymap[binding.key] = { field: field, value: binding.value };
      (keysOf[field.name] = keysOf[field.name] || []).push(binding.key);
    });
  }
  fields.forEach(function (field) { bind(field, "keys"); });
  fields.forEach(function (field) { bind(field, "spareKeys"); });
  var list = dialog.querySelector("[data-testid=shortcut-list]");
  Object.keys(keymap).forEach(function (key) {
    list.append(el("li", {}, window.annotationFields.keyName(key) + " — " + keymap[key].field.name + ": " + keymap[key].value));
  });
  [["Ctrl+Enter", "submit"], ["S", "skip"], ["Backspace or ←", "previous item (fix it)"], ["?", "these shortcuts"]]
    .forEach(function (pair) { list.append(el("li", {}, pair[0] + " — " + pair[1])); });

  function press(binding) {
    var renderer = renderers[binding.field.type];
    if (renderer.press) { renderer.press(fieldset(binding.field), binding.field, binding.value); return; }
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
    if (event.key === "s" || event.key === "S") { event.preventDefault(); skip(); clearChord(); return; }
    if (event.key === "Shift") return;
    var key = chordStart ? chordStart + event.key : event.key;
    clearChord();
    if (prefixes[key]) { event.preventDefault(); startChord(key); return; }
    var binding = keymap[key];
    if (binding) { event.preventDefault(); press(binding); }
  });

  // Two-key chords ("0 then 1"): the first key waits, shown, for the second.
  var prefixes = {}, chordStart = "", chordTimer = null;
  Object.keys(keymap).forEach(function (key) { if (key.length === 2) prefixes[key[0]] = true; });
  var chordNote = $("chord-note");
  function startChord(prefix) {
    chordStart = prefix;
    chordNote.textContent = prefix + " then …";
    chordTimer = setTimeout(clearChord, 2000);
  }
  function clearChord() {
    chordStart = "";
    chordNote.textContent = "";
    clearTimeout(chordTimer);
  }
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
    // The responses a field compares (preference, ranking), once per distinct set of candidates.
    var shown = {};
    var compared = fields.filter(function (f) {
      var key = (f.candidates || []).join("|");
      if (!renderers[f.type].comparesCandidates || shown[key]) return false;
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
  // `prefilled`: the model's answers that fill the fields (none once a draft or an answer exists);
  // `suggested`: all of them, which a field may use itself (a text's diff is shown against it);
  // `confidence`: a classifier's probability for its suggestion (null: none given), said under it.
  function renderFields(values, prefilled, suggested, confidence, example) {
    fieldBox.replaceChildren();
    fields.forEach(function (field) {
      var renderer = renderers[field.type];
      var set = el("fieldset", { "class": "field", "data-field": field.name });
      set.append(el("legend", {}, field.name.replace(/_/g, " ") + (field.required ? " *" : "")));
      if (field.description) set.append(el("p", { "class": "help" }, field.description));
      var value = values[field.name];
      if (value === undefined && renderer.prefillsFromSuggestion !== false) value = prefilled[field.name];
      renderer.render(set, field, value, { example: example, suggestion: suggested[field.name],
                                           keys: keysOf[field.name] || [], saveDraftSoon: saveDraftSoon, say: say });
      if (confidence !== null && typeof suggested[field.name] === "string") {
        set.append(el("p", { "class": "help", "data-testid": "suggestion-" + field.name },
          "Model suggests “" + suggested[field.name] + "” (" + Math.round(confidence * 100) + "% confident)"));
      }
      fieldBox.append(set);
    });
  }

  function fieldset(field) { return fieldBox.querySelector("[data-field='" + field.name + "']"); }

  function collect() {
    var values = {};
    fields.forEach(function (field) {
      var value = renderers[field.type].collect(fieldset(field), field);
      if (value !== undefined) values[field.name] = value;
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
    var confidence = item.suggestion && typeof item.suggestion.confidence === "number" ? item.suggestion.confidence : null;
    renderExample(item.example);
    renderFields(source.values || {}, prefilled, suggested, confidence, item.example);
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
