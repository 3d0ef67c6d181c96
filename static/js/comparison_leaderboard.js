// The pairwise win-rate heatmap of a leaderboard (data rendered by the server).
(function () {
  "use strict";
  var board = JSON.parse(document.getElementById("leaderboard-data").textContent);
  var names = board.models.map(function (m) { return m.name; });
  var text = board.win_matrix.map(function (row, i) {
    return row.map(function (value, j) {
      return value === null ? "" : Math.round(value * 100) + "% of " + board.games[i][j];
    });
  });
  Plotly.newPlot("win-matrix", [{
    type: "heatmap", z: board.win_matrix, x: names, y: names, text: text, hoverinfo: "x+y+text",
    texttemplate: "%{text}", zmin: 0, zmax: 1, colorscale: "RdBu", reversescale: false,
    colorbar: { title: { text: "win rate" } }
  }], { margin: { t: 10, r: 10, b: 80, l: 160 }, height: 120 + 60 * names.length,
        xaxis: { title: { text: "against" } }, yaxis: { autorange: "reversed" } },
  { displaylogo: false, responsive: true });
})();
