// A sweep's chart (data rendered by the server, ranked there): parallel coordinates, one axis per swept
// option and the last the eval loss, each line a job coloured by its loss. Plotly draws those with WebGL;
// a browser without it (or whose WebGL Plotly cannot use) gets one scatter of eval loss per option instead.
(function () {
  "use strict";
  var chart = JSON.parse(document.getElementById("sweep-chart").textContent);
  var scored = chart.trials.filter(function (t) { return t.eval_loss !== null; });
  var element = document.getElementById("chart-sweep");
  if (!scored.length) { element.hidden = true; return; }
  var losses = scored.map(function (t) { return t.eval_loss; });
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
    dimensions.push({ label: "eval loss", values: losses });
    Plotly.newPlot(element, [{
      type: "parcoords", dimensions: dimensions,
      line: { color: losses, colorscale: "Viridis", reversescale: true, showscale: true,
              colorbar: { title: { text: "eval loss" } } }
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
      layout["yaxis" + axis] = { title: { text: i ? "" : "eval loss" } };
      return { type: "scatter", mode: "markers", x: scored.map(function (t) { return t.point[option]; }), y: losses,
               xaxis: "x" + axis, yaxis: "y" + axis, text: scored.map(function (t) { return t.name; }),
               marker: { color: losses, colorscale: "Viridis", reversescale: true, size: 10 } };
    });
    element.dataset.chart = "scatter";
    Plotly.newPlot(element, traces, layout, config);
  }
})();
