// Charts of a version's statistics (Plotly from our static files).
(function () {
  "use strict";
  var stats = JSON.parse(document.getElementById("version-stats").textContent);
  var edges = stats.length_bins;
  var binLabels = edges.map(function (edge, i) {
    return i + 1 < edges.length ? edge + "–" + (edges[i + 1] - 1) : edge + "+";
  });
  var layout = { margin: { t: 10, r: 10, b: 60, l: 50 }, barmode: "group", height: 320,
                 legend: { orientation: "h" } };
  var config = { displaylogo: false, responsive: true };
  Plotly.newPlot("chart-lengths", ["prompt", "response", "total"].map(function (name) {
    return { type: "bar", name: name, x: binLabels, y: stats.lengths[name] };
  }), layout, config);
  var labels = Object.keys(stats.labels);
  Plotly.newPlot("chart-labels", [{ type: "bar", x: labels, y: labels.map(function (l) { return stats.labels[l]; }) }],
                 { margin: { t: 10, r: 10, b: 80, l: 50 }, height: 320 }, config);
})();
