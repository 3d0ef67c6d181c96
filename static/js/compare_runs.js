// Overlay of several runs' metric on one chart (data rendered by the server).
(function () {
  "use strict";
  var chart = JSON.parse(document.getElementById("compare-chart").textContent);
  Plotly.newPlot("chart-compare", chart.series.map(function (s) {
    return { type: "scatter", mode: "lines+markers", name: s.name, x: s.x, y: s.y };
  }), { margin: { t: 10, r: 10, b: 50, l: 60 }, height: 360, legend: { orientation: "h" },
        xaxis: { title: { text: chart.x_title } }, yaxis: { title: { text: chart.y_title } } },
  { displaylogo: false, responsive: true });
})();
