// Small progressive enhancements for every page. Pages work without it.
(function () {
  "use strict";
  var toggle = document.querySelector(".nav-toggle");
  var nav = document.getElementById("main-nav");
  if (toggle && nav) {
    toggle.addEventListener("click", function () {
      var open = toggle.getAttribute("aria-expanded") === "true";
      toggle.setAttribute("aria-expanded", String(!open));
      nav.classList.toggle("open", !open);
    });
  }
  document.querySelectorAll(".copy-field").forEach(function (input) {
    input.addEventListener("focus", function () { input.select(); });
  });
})();

// A websocket to this site that reconnects with backoff (1 s, doubling up to 30 s); every live
// page uses it. path: the path, or a function giving it at each connection (to resume after what
// the page has seen). handlers: message(data) gets each parsed message, and returning false ends
// the socket for good; open(socket) runs on each connection; closed(event, retrying) on each
// close; badge: an element shown only while the socket is open. A refusal (4400-4499: not logged
// in, not yours to see, gone, too many messages) is final too: retrying would only hammer.
window.liveSocket = function (path, handlers) {
  "use strict";
  if (!window.WebSocket) return;
  var delay = 1000;
  function connect() {
    var socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host +
                               (typeof path === "function" ? path() : path));
    var ended = false;
    socket.onopen = function () {
      delay = 1000;
      if (handlers.badge) handlers.badge.hidden = false;
      if (handlers.open) handlers.open(socket);
    };
    socket.onmessage = function (message) {
      if (handlers.message(JSON.parse(message.data)) === false) { ended = true; socket.close(); }
    };
    socket.onclose = function (event) {
      if (handlers.badge) handlers.badge.hidden = true;
      var retrying = !ended && !(event.code >= 4400 && event.code < 4500);
      if (handlers.closed) handlers.closed(event, retrying);
      if (!retrying) return;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  connect();
};

// Forms that undo work ask first: <form data-confirm="question">. Declined, nothing is sent.
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
}, true);

// Helpers the page scripts share, so each exists once.
window.Workbench = (function () {
  "use strict";

  // fetch() of this site's JSON API: the session cookie, the CSRF token Django wants on unsafe
  // methods (from base.html's <meta name=csrf-token>), JSON both ways. Resolves to the Response.
  function apiFetch(method, url, body) {
    var meta = document.querySelector("meta[name=csrf-token]");
    return fetch(url, {
      method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json",
                 "X-CSRFToken": meta ? meta.getAttribute("content") : "" },
      body: body === undefined ? undefined : JSON.stringify(body)
    });
  }

  // An API response's JSON, or an Error saying what was refused (the field it names first).
  function answered(response) {
    return response.json().catch(function () { return {}; }).then(function (data) {
      if (!response.ok) {
        throw new Error((data.field ? data.field + ": " : "") + (data.detail || ("The server answered " + response.status + ".")));
      }
      return data;
    });
  }

  // A random (version 4) UUID. crypto.randomUUID exists only in secure contexts (HTTPS,
  // localhost); a server reached over plain HTTP still has crypto.getRandomValues.
  function uuid() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return "10000000-1000-4000-8000-100000000000".replace(/[018]/g, function (c) {
      return (c ^ (crypto.getRandomValues(new Uint8Array(1))[0] & (15 >> (c / 4)))).toString(16);
    });
  }

  // Word-level diff of `after` against `before` (longest common subsequence of words and the
  // whitespace between them): [{op: "same"|"ins"|"del", text}], or null when the texts are too
  // long to diff in the page (the table has one cell per pair of words).
  function wordDiff(before, after) {
    var words = function (text) { return text.split(/(\s+)/).filter(function (w) { return w.length; }); };
    var a = words(before), b = words(after);
    var n = a.length, m = b.length, i, j;
    if (n * m > 4000000) return null;
    var table = [];
    for (i = 0; i <= n; i++) { table.push(new Array(m + 1).fill(0)); }
    for (i = n - 1; i >= 0; i--) {
      for (j = m - 1; j >= 0; j--) {
        table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
      }
    }
    var out = [];
    i = 0; j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[i] === b[j]) { out.push({ op: "same", text: b[j] }); i++; j++; }
      else if (j < m && (i === n || table[i][j + 1] >= table[i + 1][j])) { out.push({ op: "ins", text: b[j] }); j++; }
      else { out.push({ op: "del", text: a[i] }); i++; }
    }
    return out;
  }

  // Replace `element` with its counterpart (the element matching `selector`) in this page as the
  // server renders it now: what a finished job changed shows in place, without a full reload that
  // would reset everything else on the page. Resolves to the new element (or null).
  function refreshElement(element, selector) {
    return refreshElements([selector]).then(function (fresh) { return fresh[0]; });
  }

  // The same for several parts of the page with one request: each element matching a selector is
  // replaced by its counterpart as the server renders the page now (left as it is when the new
  // page has none). Resolves to the new elements, null for those not replaced.
  function refreshElements(selectors) {
    return fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        var page = html === null ? null : new DOMParser().parseFromString(html, "text/html");
        return selectors.map(function (selector) {
          var current = document.querySelector(selector);
          var fresh = page && page.querySelector(selector);
          if (!current || !fresh) return null;
          var adopted = document.importNode(fresh, true);
          current.replaceWith(adopted);
          return adopted;
        });
      });
  }

  // A label hotkey as a person types it: a capital letter with Shift, a two-key chord
  // ("01") as "0 then 1".
  function keyName(key) {
    var one = function (k) { return /^[A-Z]$/.test(k) ? "Shift+" + k : k; };
    return key.length === 2 ? one(key[0]) + " then " + one(key[1]) : one(key);
  }

  return { apiFetch: apiFetch, answered: answered, uuid: uuid, wordDiff: wordDiff, refreshElement: refreshElement,
           refreshElements: refreshElements, keyName: keyName };
})();
