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
      empty.firstChild.colSpan = 10;
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
