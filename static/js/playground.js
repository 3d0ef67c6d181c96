// The playground: a chat whose answers stream over the project's playground websocket.
// Time to first token is measured here, from sending to the first text; tokens/s comes
// from the worker. Reconnects with backoff (window.liveSocket); one answer at a time.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=playground]");
  if (!box || !window.WebSocket) return;
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
  var log = box.querySelector("[data-testid=chat-log]");
  var input = document.getElementById("chat-input");
  var messages = [];
  var socket = null, pending = null, current = null, currentId = null, sentAt = 0, firstTokenAt = 0;
  var askedModel = "Model";  // the name of the model the pending answer comes from

  function bubble(role, text, name) {
    var item = document.createElement("div");
    item.className = "chat-turn chat-" + role;
    item.dataset.role = role;
    var who = document.createElement("strong");
    who.textContent = role === "user" ? "You" : (name || "Model");
    var body = document.createElement("div");
    body.className = "chat-text";
    body.textContent = text;  // text while it streams; only the server's rendering is set as markup
    item.append(who, body);
    log.append(item);
    return body;
  }

  function params() {
    var value = function (id) { return document.getElementById(id).value.trim(); };
    var result = { temperature: parseFloat(value("pg-temperature") || "0"),
                   max_new_tokens: parseInt(value("pg-max-tokens") || "128", 10),
                   top_p: parseFloat(value("pg-top-p") || "1") };
    if (value("pg-seed")) result.seed = parseInt(value("pg-seed"), 10);
    if (value("pg-stop")) result.stop = [value("pg-stop")];
    return result;
  }

  function connect() {
    window.liveSocket(box.dataset.socket, {
      open: function (opened) {
        socket = opened;
        if (pending) { socket.send(pending); pending = null; }
      },
      message: function (data) {
        if (data.type === "started") {
          current = bubble("assistant", "", askedModel);
          currentId = data.id;
          field("stop").hidden = false;
        } else if (data.type === "delta" && current) {
          if (!firstTokenAt) firstTokenAt = performance.now();
          current.textContent += data.text;
        } else if (data.type === "done") {
          messages.push({ role: "assistant", content: current.textContent });
          // The answer streamed as text; once whole, the server's Markdown rendering replaces it
          // (raw HTML in the answer stays text there). The raw text is kept for the next turn.
          if (data.html) { current.innerHTML = data.html; current.classList.add("markdown"); }
          var r = data.result;
          field("stats").textContent = "first token " + Math.round(firstTokenAt - sentAt) + " ms · " +
            (r.tokens_per_s || 0) + " tokens/s · " + r.completion_tokens + " tokens (" + r.finish_reason + ")";
          current = null;
          field("stop").hidden = true;
        } else if (data.type === "error") {
          field("stop").hidden = true;
          field("error").textContent = data.detail || (data.result && data.result.error) || "The model failed.";
          if (current) { current.parentNode.remove(); current = null; }
          messages.pop();
          log.lastChild && log.lastChild.dataset.role === "user" && log.lastChild.remove();
        }
      },
      closed: function (event, retrying) {
        socket = null;
        if (retrying) return;
        field("error").textContent = event.code === 4429 ? "Too many messages at once: reload the page to go on."
          : "You no longer have access to this playground.";
      }
    });
  }

  field("chat-form").addEventListener("submit", function (event) {
    event.preventDefault();
    var text = input.value.trim();
    if (!text || current) return;
    field("error").textContent = "";
    var system = document.getElementById("pg-system").value.trim();
    messages.push({ role: "user", content: text });
    bubble("user", text);
    input.value = "";
    var turns = system ? [{ role: "system", content: system }].concat(messages) : messages.slice();
    var select = document.getElementById("pg-model");
    askedModel = select.selectedIndex >= 0 ? select.options[select.selectedIndex].text : "Model";
    var payload = JSON.stringify({ type: "generate", model: select.value, messages: turns, params: params() });
    sentAt = performance.now();
    firstTokenAt = 0;
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(payload); else pending = payload;
  });
  // Stop: the worker ends the answer after its next token; it arrives as "done" (cancelled).
  field("stop").addEventListener("click", function () {
    if (current && socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "cancel", id: currentId }));
    }
  });
  field("clear").addEventListener("click", function () {
    messages = [];
    log.replaceChildren();
    field("stats").textContent = "";
  });
  connect();
})();
