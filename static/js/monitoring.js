// The monitoring dashboard, live: tiles, charts and the open-alert table redrawn from each
// snapshot the server sends over ws/monitoring/ (one every few seconds, and at once when an
// alert changes). Acknowledge and resolve go through the API without leaving the page (the
// forms post to the page without JS). The route table sorts by any column.
(function () {
  "use strict";
  var table = document.querySelector("[data-testid=open-alerts]");
  if (!table) return;
  var csrf = document.querySelector("meta[name=csrf-token]").getAttribute("content");
  var alertError = document.querySelector("[data-field=alert-error]");
  var config = { displaylogo: false, responsive: true };

  // Every chart spans the same window, ending at the snapshot's time, so they line up.
  var windowMs = 60 * 60 * 1000;
  var windowEnd = new Date();

  function layout(yTitle, extra) {
    var base = { margin: { t: 8, r: 8, b: 32, l: 48 }, height: 220, showlegend: true,
                 legend: { orientation: "h", y: -0.25 },
                 xaxis: { type: "date", range: [new Date(windowEnd - windowMs), windowEnd] },
                 yaxis: { title: { text: yTitle }, rangemode: "tozero" } };
    return Object.assign(base, extra || {});
  }

  function time(epochSeconds) { return new Date(epochSeconds * 1000); }

  function drawCharts(history, at) {
    if (!window.Plotly) return;
    windowEnd = new Date(at);
    var queues = {};
    history.queues.forEach(function (sample) {
      Object.keys(sample.waiting).forEach(function (name) {
        queues[name] = queues[name] || { x: [], y: [] };
        queues[name].x.push(time(sample.at));
        queues[name].y.push(sample.waiting[name]);
      });
    });
    Plotly.react("chart-queues", Object.keys(queues).sort().map(function (name) {
      return { type: "scatter", mode: "lines", line: { shape: "hv" }, name: name, x: queues[name].x, y: queues[name].y };
    }), layout("messages"), config);
    var minutes = history.requests;
    var xs = minutes.map(function (m) { return time(m.at); });
    Plotly.react("chart-latency", [{ type: "scatter", mode: "lines+markers", name: "mean", x: xs,
      y: minutes.map(function (m) { return m.mean_ms; }) }], layout("ms", { showlegend: false }), config);
    Plotly.react("chart-errors", [{ type: "bar", name: "5xx share", x: xs,
      y: minutes.map(function (m) { return m.error_rate; }) }],
      layout("share", { showlegend: false, yaxis: { tickformat: ".0%", rangemode: "tozero" } }), config);
  }

  function setTile(name, value) {
    var tile = document.querySelector("[data-tile=" + name + "]");
    if (tile) tile.textContent = value === null || value === undefined ? "?" : String(value);
  }

  function drawTiles(tiles) {
    ["workers_online", "queued_total", "running_jobs", "failures", "open_alerts", "unacknowledged_alerts"]
      .forEach(function (name) { setTile(name, tiles[name]); });
    var queues = tiles.queues || {};
    setTile("queues", Object.keys(queues).map(function (name) { return name + " " + queues[name]; }).join(" · "));
  }

  function clock(iso) {
    var d = new Date(iso);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  }

  function cell(row, text) {
    var td = document.createElement("td");
    if (text !== undefined) td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function actionForm(alert, action, label) {
    var form = document.createElement("form");
    form.method = "post";
    form.action = table.dataset.alertsBase + alert.id + "/" + action + "/";
    form.dataset.alertAction = action;
    var token = document.createElement("input");
    token.type = "hidden"; token.name = "csrfmiddlewaretoken"; token.value = csrf;
    var button = document.createElement("button");
    button.type = "submit"; button.textContent = label;
    form.append(token, button);
    return form;
  }

  function alertRow(alert) {
    var row = document.createElement("tr");
    row.setAttribute("data-testid", "alert");
    row.dataset.alertId = alert.id;
    cell(row, alert.rule_display);
    cell(row, alert.message);
    var since = cell(row, clock(alert.first_seen));
    var last = document.createElement("p");
    last.className = "muted"; last.textContent = "last " + clock(alert.last_seen);
    since.appendChild(last);
    var acknowledged = cell(row, alert.acknowledged_at
      ? "by " + (alert.acknowledged_by || "—") + " at " + clock(alert.acknowledged_at) : "no");
    acknowledged.dataset.field = "acknowledged";
    cell(row, alert.notified_at ? "sent " + clock(alert.notified_at)
      : (table.dataset.webhook === "yes" ? "not yet" : "—"));
    var actions = cell(row);
    actions.className = "alert-actions";
    if (!alert.acknowledged_at) actions.appendChild(actionForm(alert, "acknowledge", "Acknowledge"));
    actions.appendChild(actionForm(alert, "resolve", "Resolve"));
    return row;
  }

  function drawAlerts(alerts) {
    var body = table.tBodies[0];
    body.replaceChildren.apply(body, alerts.map(alertRow));
    if (!alerts.length) {
      var row = document.createElement("tr");
      row.setAttribute("data-testid", "no-alerts");
      cell(row, "No open alerts.").colSpan = 6;
      body.appendChild(row);
    }
  }

  // Serving engine figures per model and adapter (apps.monitoring.engine_metrics.lines).
  var inferenceTable = document.querySelector("[data-testid=inference]");

  function ms(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    return seconds < 1 ? (seconds * 1000).toFixed(1) + " ms" : seconds.toFixed(2) + " s";
  }

  function rate(perSecond) { return perSecond === null || perSecond === undefined ? "—" : perSecond.toFixed(1); }

  function size(bytes) {
    if (!bytes) return "—";
    var units = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (bytes >= 1024 && i < units.length - 1) { bytes /= 1024; i += 1; }
    return (i ? bytes.toFixed(1) : String(bytes)) + " " + units[i];
  }

  function drawInference(inference) {
    if (!inferenceTable || !inference) return;
    var error = document.querySelector("[data-field=inference-error]");
    error.hidden = !inference.error;
    error.textContent = inference.error ? "Engine figures unavailable: " + inference.error + "." : "";
    setField("inference-workers", inference.workers);
    var body = inferenceTable.tBodies[0];
    body.replaceChildren.apply(body, inference.lines.map(function (line) {
      var row = document.createElement("tr");
      row.setAttribute("data-testid", "inference-line");
      row.dataset.model = line.model;
      row.dataset.adapter = line.adapter;
      [[line.model], [line.adapter || "(base)"], [String(line.requests), "requests"], [String(line.tokens), "tokens"],
       [ms(line.ttft_p50_s), "ttft_p50"], [ms(line.ttft_p99_s), "ttft_p99"], [ms(line.inter_token_p50_s), "inter_token_p50"],
       [rate(line.tokens_per_s), "tokens_per_s"], [rate(line.stream_tokens_per_s), "stream_tokens_per_s"],
       [ms(line.queue_wait_p50_s), "queue_wait_p50"],
       [line.occupancy === null ? "—" : Math.round(line.occupancy * 100) + "%", "occupancy"],
       [size(line.kv_cache_bytes), "kv_cache"], [size(line.memory_bytes), "memory"]].forEach(function (pair) {
        var td = cell(row, pair[0]);
        if (pair[1]) td.dataset.field = pair[1];
      });
      return row;
    }));
    if (!inference.lines.length) {
      var row = document.createElement("tr");
      row.setAttribute("data-testid", "no-inference");
      cell(row, "No inference worker has served a generation yet.").colSpan = 13;
      body.appendChild(row);
    }
  }

  function setField(name, value) {
    var field = document.querySelector("[data-field=" + name + "]");
    if (field) field.textContent = String(value);
  }

  function draw(snapshot) {
    drawTiles(snapshot.tiles);
    drawInference(snapshot.inference);
    drawAlerts(snapshot.alerts);
    drawCharts(snapshot.history, snapshot.at);
    var updated = document.querySelector("[data-field=updated]");
    if (updated) updated.textContent = clock(snapshot.at);
  }

  var initial = JSON.parse(document.getElementById("monitoring-snapshot").textContent);
  windowMs = initial.history_min * 60 * 1000;
  drawCharts(initial.history, initial.at);
  drawInference(initial.inference);

  window.liveSocket("/ws/monitoring/", {
    badge: document.querySelector("[data-testid=live-badge]"),
    message: function (data) {
      if (data.type === "snapshot") draw(data.snapshot);
    },
  });

  // Acknowledge / resolve through the API; the socket then brings every dashboard the change.
  table.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.dataset.alertAction) return;
    event.preventDefault();
    var row = form.closest("tr");
    form.querySelector("button").disabled = true;
    Workbench.apiFetch("POST", "/api/monitoring/alerts/" + row.dataset.alertId + "/" + form.dataset.alertAction + "/")
    .then(function (response) {
      return response.json().then(function (body) { return { ok: response.ok, body: body }; });
    }).then(function (result) {
      if (!result.ok) throw new Error(result.body.detail || "The server refused.");
      alertError.hidden = true;
      if (result.body.resolved_at) row.remove();
      else row.replaceWith(alertRow(result.body));
    }).catch(function (error) {
      alertError.textContent = "Could not " + form.dataset.alertAction + " the alert: " + error.message;
      alertError.hidden = false;
      form.querySelector("button").disabled = false;
    });
  });

  // Sortable route table: numbers largest first on the first click, text A to Z.
  document.querySelectorAll("table.sortable").forEach(function (sortable) {
    sortable.querySelectorAll("th button[data-sort]").forEach(function (button) {
      button.addEventListener("click", function () {
        var header = button.closest("th");
        var column = Array.prototype.indexOf.call(header.parentNode.children, header);
        var numeric = button.dataset.sort === "number";
        var current = header.getAttribute("aria-sort");
        var descending = current === "none" ? numeric : current === "ascending";
        sortable.querySelectorAll("thead th").forEach(function (th) { th.setAttribute("aria-sort", "none"); });
        header.setAttribute("aria-sort", descending ? "descending" : "ascending");
        var body = sortable.tBodies[0];
        var rows = Array.prototype.filter.call(body.rows, function (r) { return r.cells.length > column && r.cells[column].dataset.value !== undefined; });
        function key(row) {
          var value = row.cells[column].dataset.value;
          if (!numeric) return value.toLowerCase();
          return value === "" ? -Infinity : parseFloat(value);
        }
        rows.sort(function (a, b) {
          var ka = key(a), kb = key(b);
          var order = ka < kb ? -1 : ka > kb ? 1 : 0;
          return descending ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})();
