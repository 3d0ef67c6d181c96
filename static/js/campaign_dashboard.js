// The campaign dashboard's charts: agreement per field and annotations per annotator (Plotly).
// Drawn from the numbers rendered with the page, then again from each count the campaign's
// socket sends (campaign_progress.js passes them on as a "campaign-quality" event).
(function () {
  "use strict";
  var data = document.getElementById("campaign-quality");
  if (!data || !window.Plotly) return;
  var layout = function (title, y) {
    return { title: { text: title }, margin: { t: 40, r: 10, b: 60, l: 50 }, yaxis: { title: { text: y } }, height: 300 };
  };
  var config = { displaylogo: false, responsive: true };
  function draw(quality) {
    var fields = quality.fields;
    Plotly.react("agreement-chart", [
      { type: "bar", name: "Krippendorff's α", x: fields.map(function (f) { return f.field; }),
        y: fields.map(function (f) { return f.krippendorff_alpha; }) },
      { type: "bar", name: "Fleiss' κ", x: fields.map(function (f) { return f.field; }),
        y: fields.map(function (f) { return f.fleiss_kappa; }) }
    ], layout("Agreement per field", "agreement"), config);
    var people = quality.annotators;
    Plotly.react("throughput-chart", [
      { type: "bar", name: "annotations", x: people.map(function (p) { return p.annotator; }),
        y: people.map(function (p) { return p.annotations; }) },
      { type: "scatter", mode: "markers", name: "agreement with consensus", yaxis: "y2",
        x: people.map(function (p) { return p.annotator; }), y: people.map(function (p) { return p.consensus_agreement; }) }
    ], Object.assign(layout("Annotators", "annotations"),
      { yaxis2: { overlaying: "y", side: "right", range: [0, 1], title: { text: "agreement" } } }), config);
  }
  draw(JSON.parse(data.textContent));
  window.addEventListener("campaign-quality", function (event) { draw(event.detail); });
})();
