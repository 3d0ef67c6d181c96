// A job page, live: state, metric charts and log over the job's websocket. On connect the
// server sends the backlog from the database, then the live stream; points are keyed by
// (kind, step), so one that arrives twice is drawn once. Reconnects with backoff.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=job]");
  if (!box || !window.WebSocket) return;
  var ended = ["succeeded", "failed", "cancelled"];
  var initialState = box.dataset.state;
  // Fields are on the whole page (the log and the samples are outside the job's card).
  var field = function (name) { return document.querySelector("[data-field=" + name + "]"); };
  var points = { train: {}, eval: {} };
  var lastStep = -1;
  var drawPending = false;
  var config = { displaylogo: false, responsive: true };
  var layout = function (title) {
    return { margin: { t: 10, r: 10, b: 40, l: 60 }, height: 260, legend: { orientation: "h" },
             xaxis: { title: { text: "step" } }, yaxis: { title: { text: title } } };
  };

  function series(kind, key) {
    var steps = Object.keys(points[kind]).map(Number).sort(function (a, b) { return a - b; });
    var xs = [], ys = [];
    steps.forEach(function (step) {
      var value = points[kind][step][key];
      if (value !== undefined && value !== null) { xs.push(step); ys.push(value); }
    });
    return { x: xs, y: ys };
  }

  function line(kind, key, name) {
    var s = series(kind, key);
    return { type: "scatter", mode: kind === "eval" ? "lines+markers" : "lines", name: name, x: s.x, y: s.y };
  }

  function draw() {
    drawPending = false;
    Plotly.react("chart-loss", [line("train", "loss", "train loss"), line("eval", "eval_loss", "eval loss")],
                 layout("loss"), config);
    Plotly.react("chart-lr", [line("train", "lr", "learning rate")], layout("lr"), config);
    Plotly.react("chart-grad", [line("train", "grad_norm", "grad norm")], layout("grad norm"), config);
    Plotly.react("chart-speed", [line("train", "tokens_per_s", "tokens/s")], layout("tokens/s"), config);
    if (classes) drawClassifier();
  }

  // A classifier (the page carries its classes): its scores, and the latest evaluation's confusion matrix.
  var classesScript = document.getElementById("class-labels");
  var classes = classesScript ? JSON.parse(classesScript.textContent) : null;

  function drawClassifier() {
    var scores = layout("score");
    scores.yaxis.range = [0, 1.02];
    Plotly.react("chart-scores", [line("train", "accuracy", "train accuracy"), line("eval", "eval_accuracy", "eval accuracy"),
                                  line("eval", "eval_macro_f1", "eval macro-F1")], scores, config);
    var steps = Object.keys(points.eval).map(Number).filter(function (step) {
      return points.eval[step].eval_confusion;
    }).sort(function (a, b) { return a - b; });
    if (!steps.length) return;
    var counts = points.eval[steps[steps.length - 1]].eval_confusion;
    // Multi-label: one row per class, its outcomes as columns (workers.training.methods.classify).
    var multiLabel = document.getElementById("chart-confusion").dataset.multiLabel === "true";
    var columns = multiLabel ? ["true positive", "false positive", "false negative", "true negative"] : classes;
    var heat = layout(multiLabel ? "class" : "true class");
    heat.xaxis = { title: { text: multiLabel ? "outcome" : "predicted class" }, type: "category" };
    heat.yaxis = { title: { text: multiLabel ? "class" : "true class" }, type: "category", autorange: "reversed" };
    heat.height = Math.max(260, 40 * classes.length + 80);
    Plotly.react("chart-confusion", [{ type: "heatmap", x: columns, y: classes, z: counts, colorscale: "Blues",
                                       text: counts, texttemplate: "%{text}",
                                       hovertemplate: (multiLabel ? "%{y}: %{x}" : "true %{y}, predicted %{x}") +
                                         ": %{z}<extra></extra>" }],
                 heat, config);
  }

  function scheduleDraw() {
    if (!drawPending) { drawPending = true; setTimeout(draw, 250); }
  }

  function renderProgress(step, tokens) {
    field("step").textContent = step;
    if (tokens !== undefined && tokens !== null) field("tokens").textContent = tokens;
    box.querySelector("progress").value = step;
  }

  function renderState(job) {
    field("state").textContent = job.state;
    if (job.total_steps) {
      field("total").textContent = job.total_steps;
      field("of").hidden = false;
      box.querySelector("progress").max = job.total_steps;
    }
    renderProgress(Math.max(job.current_step, lastStep, 0), job.tokens_trained);
    if (job.checkpoint_step) {
      field("checkpoint").textContent = job.checkpoint_step;
      field("checkpoint-note").hidden = false;
    }
    field("error").textContent = job.error || "";
    if (ended.indexOf(job.state) >= 0 && ended.indexOf(initialState) < 0) {
      // The outcome (adapter, metrics, traceback, the actions that now apply) is rendered by the
      // server: those parts are replaced in place, the charts and the log stay as they are.
      initialState = job.state;
      Workbench.refreshElements(["[data-testid=job-actions]", "[data-testid=job-outcome]",
                                 "[data-testid=samples-card]", "[data-testid=run-info]"]);
    }
  }

  function addPoints(list) {
    list.forEach(function (point) {
      var kind = point.kind === "eval" ? "eval" : "train";
      points[kind][point.step] = point;
      if (point.step > lastStep) {
        lastStep = point.step;
        if (kind === "train") renderProgress(point.step, point.tokens_seen);  // each step, as it is trained
      }
    });
    scheduleDraw();
  }

  function connect() {
    var live = field("live");
    window.liveSocket(function () {  // after a reconnection, only the points not seen yet
      return box.dataset.socket + (lastStep >= 0 ? "?after_step=" + lastStep : "");
    }, {
      message: function (data) {
        if (data.type === "state") renderState(data.job);
        else if (data.type === "points") addPoints(data.points);
        else if (data.type === "live") live.hidden = false;
        else if (data.type === "log_tail") {  // the log as stored when this socket joined
          field("log").textContent = data.text;
        } else if (data.type === "log") {
          var log = field("log");
          // A line stored just as the socket joined comes both in the tail and live: shown once.
          if (log.textContent.split("\n").slice(-1)[0] !== data.line) {
            log.textContent += (log.textContent ? "\n" : "") + data.line;
          }
          log.scrollTop = log.scrollHeight;
        }
      },
      closed: function () { live.hidden = true; }
    });
  }
  draw();
  connect();
})();
