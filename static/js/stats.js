// Charts of a version's statistics (Plotly from our static files).
(function () {
  "use strict";
  var config = { displaylogo: false, responsive: true };
  var tokens = document.getElementById("token-stats");
  if (tokens) {
    var tokenStats = JSON.parse(tokens.textContent);
    var tokenBins = tokenStats.bins.map(function (edge, i) {
      return i + 1 < tokenStats.bins.length ? edge + "–" + (tokenStats.bins[i + 1] - 1) : edge + "+";
    });
    Plotly.newPlot("chart-tokens", ["prompt", "response", "total"].map(function (name) {
      return { type: "bar", name: name, x: tokenBins, y: tokenStats.histograms[name] };
    }), { margin: { t: 10, r: 10, b: 60, l: 50 }, barmode: "group", height: 320, legend: { orientation: "h" } }, config);
  }
  var source = document.getElementById("version-stats");
  if (!source) return;
  var stats = JSON.parse(source.textContent);
  var edges = stats.length_bins;
  var binLabels = edges.map(function (edge, i) {
    return i + 1 < edges.length ? edge + "–" + (edges[i + 1] - 1) : edge + "+";
  });
  var layout = { margin: { t: 10, r: 10, b: 60, l: 50 }, barmode: "group", height: 320,
                 legend: { orientation: "h" } };
  Plotly.newPlot("chart-lengths", ["prompt", "response", "total"].map(function (name) {
    return { type: "bar", name: name, x: binLabels, y: stats.lengths[name] };
  }), layout, config);
  var labels = Object.keys(stats.labels);
  Plotly.newPlot("chart-labels", [{ type: "bar", x: labels, y: labels.map(function (l) { return stats.labels[l]; }) }],
                 { margin: { t: 10, r: 10, b: 80, l: 50 }, height: 320 }, config);
})();
