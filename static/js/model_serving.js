// The model page's serving figures: a table per version and alias and a chart of requests and
// p99 latency per version over time, read from the serving-metrics API and refreshed while the
// page is open. Names are set as text, never as HTML.
(function () {
  "use strict";
  var section = document.querySelector("[data-testid=serving]");
  if (!section) return;
  var body = section.querySelector("tbody");
  var chart = section.querySelector("[data-testid=serving-chart]");

  function num(value, digits) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
  }

  function cell(row, text) {
    var td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
  }

  function render(data) {
    body.replaceChildren();
    if (!data.lines.length) {
      var empty = document.createElement("tr");
      cell(empty, "Nothing served in this window.");
      empty.firstChild.colSpan = 11;
      body.appendChild(empty);
    }
    data.lines.forEach(function (line) {
      var row = document.createElement("tr");
      row.dataset.version = line.version;
      row.dataset.alias = line.alias || "";
      cell(row, line.version_name);
      cell(row, line.alias ? "@" + line.alias : "by name");
      cell(row, String(line.requests));
      cell(row, line.errors + (line.requests ? " (" + num(100 * line.error_rate, 1) + "%)" : ""));
      cell(row, num(line.ttft_p50_s, 3) + " / " + num(line.ttft_p99_s, 3));
      cell(row, num(line.latency_p50_s, 3) + " / " + num(line.latency_p99_s, 3));
      cell(row, line.judged ? num(line.quality, 2) + " (" + line.judged + " judged)" : "–");
      cell(row, line.tokens_in + " / " + line.tokens_out);
      cell(row, num(line.tokens_per_s, 1));
      cell(row, num(line.worker_seconds, 1));
      cell(row, line.cost === null ? "no price set" : num(line.cost, 4));
      body.appendChild(row);
    });
    var traces = [];
    data.series.forEach(function (s) {
      var x = s.points.map(function (p) { return p.at; });
      traces.push({ type: "bar", name: s.version_name + " requests", x: x,
                    y: s.points.map(function (p) { return p.requests; }) });
      traces.push({ type: "scatter", mode: "lines+markers", name: s.version_name + " p99 s", x: x, yaxis: "y2",
                    y: s.points.map(function (p) { return p.latency_p99_s; }) });
    });
    Plotly.react(chart, traces, {
      margin: { t: 10, r: 60, b: 50, l: 60 }, height: 320, barmode: "group", legend: { orientation: "h" },
      yaxis: { title: { text: "requests" } },
      yaxis2: { title: { text: "p99 latency (s)" }, overlaying: "y", side: "right", rangemode: "tozero" }
    }, { displaylogo: false, responsive: true });
    section.dataset.loaded = String(Date.now());
  }

  function load() {
    Workbench.apiFetch("GET", section.dataset.metricsUrl + "?hours=24&bucket_minutes=60")
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) { if (data) render(data); })
      .catch(function () { /* the next refresh tries again */ });
  }

  load();
  setInterval(function () { if (!document.hidden) load(); }, 15000);
})();

// Request logging: each alias's settings saved through the API (a refusal names its field), and
// its newest captures with their feedback, refreshed with the figures.
(function () {
  "use strict";
  document.querySelectorAll("[data-testid=capture-form]").forEach(function (form) {
    var status = form.querySelector("[data-testid=capture-status]");
    var list = document.querySelector("[data-testid=capture-list][data-alias='" + form.dataset.alias + "']");

    function number(name) {
      var value = form.elements[name].value;
      return value === "" ? null : Number(value);
    }

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      Workbench.apiFetch("PUT", form.dataset.captureUrl, {
        enabled: form.elements.enabled.checked, sample_rate: number("sample_rate"),
        retention_days: number("retention_days"), redact: form.elements.redact.checked
      }).then(function (response) {
        return response.json().then(function (body) {
          if (response.ok) {
            status.textContent = body.enabled ? "Logging " + Math.round(body.sample_rate * 100) +
              "% of requests, kept " + body.retention_days + " days" + (body.redact ? ", redacted." : ".") : "Not logging.";
          } else {
            // Domain errors say {detail, field}; DRF's own say {field: [message]}.
            var field = body.field || Object.keys(body)[0];
            var message = body.detail || (Array.isArray(body[field]) ? body[field][0] : "refused");
            status.textContent = (field ? field + ": " : "") + message;
          }
        });
      });
    });

    function loadCaptures() {
      Workbench.apiFetch("GET", form.dataset.capturesUrl).then(function (response) {
        return response.ok ? response.json() : null;
      }).then(function (page) {
        if (!page) return;
        list.replaceChildren();
        page.results.slice(0, 5).forEach(function (capture) {
          var item = document.createElement("li");
          var asked = capture.messages.length ? capture.messages[capture.messages.length - 1].content : "";
          item.textContent = capture.created_at.slice(0, 19).replace("T", " ") + " — " + asked.slice(0, 120) +
            " → " + capture.response.slice(0, 120) +
            (capture.feedback_score === null ? "" : " (feedback " + capture.feedback_score + ")");
          list.appendChild(item);
        });
        list.dataset.count = String(page.results.length);
      }).catch(function () { /* the next refresh tries again */ });
    }

    loadCaptures();
    setInterval(function () { if (!document.hidden) loadCaptures(); }, 15000);
  });
})();
