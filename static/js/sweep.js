// A sweep's parallel-coordinates chart: one axis per swept option, the last the eval loss; each line
// is a job, coloured by its loss (data rendered by the server, ranked there).
(function () {
  "use strict";
  var chart = JSON.parse(document.getElementById("sweep-chart").textContent);
  var scored = chart.trials.filter(function (t) { return t.eval_loss !== null; });
  var element = document.getElementById("chart-sweep");
  if (!scored.length) { element.hidden = true; return; }
  var dimensions = chart.options.map(function (option) {
    return { label: option, values: scored.map(function (t) { return t.point[option]; }) };
  });
  var losses = scored.map(function (t) { return t.eval_loss; });
  dimensions.push({ label: "eval loss", values: losses });
  Plotly.newPlot(element, [{
    type: "parcoords", dimensions: dimensions,
    line: { color: losses, colorscale: "Viridis", reversescale: true, showscale: true,
            colorbar: { title: { text: "eval loss" } } }
  }], { margin: { t: 40, r: 60, b: 20, l: 60 }, height: 380 }, { displaylogo: false, responsive: true });
})();
