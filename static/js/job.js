// A job page, live: state, metric charts and log over the job's websocket. On connect the
// server sends the backlog from the database, then the live stream; points are keyed by
// (kind, step), so one that arrives twice is drawn once. Reconnects with backoff.
(function () {
  "use strict";
  var box = document.querySelector("[data-testid=job]");
  if (!box || !window.WebSocket) return;
  var ended = ["succeeded", "failed", "cancelled"];
  var initialState = box.dataset.state;
  var field = function (name) { return box.querySelector("[data-field=" + name + "]"); };
  var points = { train: {}, eval: {} };
  var lastStep = -1;
  var delay = 1000;
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
  }

  function scheduleDraw() {
    if (!drawPending) { drawPending = true; setTimeout(draw, 250); }
  }

  function renderState(job) {
    field("state").textContent = job.state;
    field("step").textContent = job.current_step;
    if (job.total_steps) field("total").textContent = job.total_steps;
    field("tokens").textContent = job.tokens_trained;
    field("error").textContent = job.error || "";
    var bar = box.querySelector("progress");
    if (job.total_steps) bar.max = job.total_steps;
    bar.value = job.current_step;
    if (ended.indexOf(job.state) >= 0 && ended.indexOf(initialState) < 0) {
      // The outcome (adapter, metrics, traceback) is rendered by the server: show it.
      setTimeout(function () { location.reload(); }, 500);
    }
  }

  function addPoints(list) {
    list.forEach(function (point) {
      var kind = point.kind === "eval" ? "eval" : "train";
      points[kind][point.step] = point;
      if (point.step > lastStep) lastStep = point.step;
    });
    scheduleDraw();
  }

  function connect() {
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + box.dataset.socket +
      (lastStep >= 0 ? "?after_step=" + lastStep : "");
    var socket = new WebSocket(url);
    var live = field("live");
    socket.onmessage = function (message) {
      var data = JSON.parse(message.data);
      if (data.type === "state") renderState(data.job);
      else if (data.type === "points") addPoints(data.points);
      else if (data.type === "live") { live.hidden = false; delay = 1000; }
      else if (data.type === "log") {
        var log = field("log");
        log.textContent += (log.textContent ? "\n" : "") + data.line;
        log.scrollTop = log.scrollHeight;
      }
    };
    socket.onclose = function (closed) {
      live.hidden = true;
      if (closed.code === 4401 || closed.code === 4403 || closed.code === 4404) return;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  draw();
  connect();
})();
