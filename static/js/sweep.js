// A sweep's chart (data rendered by the server, ranked there): parallel coordinates, one axis per swept
// option and the last the sweep's objective (eval loss, or a classifier's macro-F1), each line a job
// coloured by it, the best brightest. Plotly draws those with WebGL; a browser without it (or whose WebGL
// Plotly cannot use) gets one scatter of the objective per option instead.
(function () {
  "use strict";
  var chart = JSON.parse(document.getElementById("sweep-chart").textContent);
  var objective = chart.objective;
  var scored = chart.trials.filter(function (t) { return t.score !== null; });
  var element = document.getElementById("chart-sweep");
  if (!scored.length) { element.hidden = true; return; }
  var scores = scored.map(function (t) { return t.score; });
  var reverse = !objective.higher_is_better;  // Viridis is brightest at its top: the best end
  var config = { displaylogo: false, responsive: true };

  function webgl() {
    try {
      var canvas = document.createElement("canvas");
      return !!(window.WebGLRenderingContext && (canvas.getContext("webgl") || canvas.getContext("experimental-webgl")));
    } catch (e) { return false; }
  }

  if (webgl()) {
    var dimensions = chart.options.map(function (option) {
      return { label: option, values: scored.map(function (t) { return t.point[option]; }) };
    });
    dimensions.push({ label: objective.label, values: scores });
    Plotly.newPlot(element, [{
      type: "parcoords", dimensions: dimensions,
      line: { color: scores, colorscale: "Viridis", reversescale: reverse, showscale: true,
              colorbar: { title: { text: objective.label } } }
    }], { margin: { t: 40, r: 60, b: 20, l: 60 }, height: 380 }, config).then(function () {
      if (element.querySelector(".no-webgl")) {  // Plotly could not get the WebGL it needs
        Plotly.purge(element);
        scatter();
      } else {
        element.dataset.chart = "parcoords";
      }
    });
    return;
  }
  scatter();

  function scatter() {
    var layout = { margin: { t: 20, r: 20, b: 50, l: 60 }, height: 340, showlegend: false,
                   grid: { rows: 1, columns: chart.options.length, pattern: "independent" } };
    var traces = chart.options.map(function (option, i) {
      var axis = i ? String(i + 1) : "";
      layout["xaxis" + axis] = { title: { text: option } };
      layout["yaxis" + axis] = { title: { text: i ? "" : objective.label } };
      return { type: "scatter", mode: "markers", x: scored.map(function (t) { return t.point[option]; }), y: scores,
               xaxis: "x" + axis, yaxis: "y" + axis, text: scored.map(function (t) { return t.name; }),
               marker: { color: scores, colorscale: "Viridis", reversescale: reverse, size: 10 } };
    });
    element.dataset.chart = "scatter";
    Plotly.newPlot(element, traces, layout, config);
  }
})();
