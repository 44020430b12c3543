// Monitor's live charts in the browser (mounted by console/ui/live_chart.py, fed by
// console/chart_feed.py): the figure arrives whole once, then each message carries only the
// points this browser lacks. A message that does not fit what the chart holds (the chart was
// remounted, a message was missed) makes it ask the server for the whole figure ("resync").
const PLOTLY_URL = "app/static/plotly.min.js";
const CONFIG = {responsive: true, displaylogo: false};

function plotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!window.__tfconsolePlotly) {
    window.__tfconsolePlotly = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = new URL(PLOTLY_URL, document.baseURI).href;
      s.onload = () => resolve(window.Plotly);
      s.onerror = () => { window.__tfconsolePlotly = null; reject(new Error("plotly.js did not load")); };
      document.head.appendChild(s);
    });
  }
  return window.__tfconsolePlotly;
}

// What this chart has received, readable in the page (browser tests and benchmarks read it).
function count(el, msg, points) {
  el.dataset.lastOp = msg.op;
  el.dataset.whole = String(Number(el.dataset.whole || 0) + (msg.op === "full" ? 1 : 0));
  el.dataset.points = String(Number(el.dataset.points || 0) + points);
}

// When each line first showed a point (the browser's clock, ms): a benchmark reads when a curve
// was drawn instead of when its own polling happened to look.
function noteDrawn(el) {
  const first = el.__firstDrawn || (el.__firstDrawn = {});
  for (const t of (el._fullData || [])) {
    if (t.name && !(t.name in first) && t.y && t.y.length) first[t.name] = Date.now();
  }
}

function apply(P, el, msg, ask) {
  const held = el.__feed;
  const layout = Object.assign({}, msg.layout, {datarevision: msg.seq});
  if (msg.op === "full") {
    count(el, msg, msg.data.reduce((n, t) => n + t.x.length, 0));
    el.__feed = {seq: msg.seq, data: msg.data, layoutText: JSON.stringify(msg.layout)};
    return P.react(el, msg.data, layout, CONFIG);
  }
  if (held && held.seq === msg.seq) {            // no new points; a title may have changed
    const text = JSON.stringify(msg.layout);
    if (msg.op !== "same" || text === held.layoutText) return null;
    held.layoutText = text;
    return P.react(el, held.data, layout, CONFIG);
  }
  if (!held || msg.op !== "delta" || held.seq !== msg.base) {
    // This chart holds something else than the server thinks: ask for the whole figure.
    ask("resync", `${held ? held.seq : "none"}>${msg.seq}@${Date.now()}`);
    return null;
  }
  count(el, msg, msg.traces.reduce((n, t) => n + t.x.length, 0));
  held.data = held.data.map((trace, i) => {
    const d = msg.traces[i];
    const end = d.drop + d.keep;
    return Object.assign({}, trace, d.style || {}, {x: trace.x.slice(d.drop, end).concat(d.x),
                                     y: trace.y.slice(d.drop, end).concat(d.y)});
  });
  held.seq = msg.seq;
  held.layoutText = JSON.stringify(msg.layout);
  return P.react(el, held.data, layout, CONFIG);
}

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  let el = parentElement.querySelector("div.tfconsole-chart");
  if (!el) {
    el = document.createElement("div");
    el.className = "tfconsole-chart";
    parentElement.appendChild(el);
  }
  el.style.height = `${data.height}px`;
  el.dataset.messages = String(Number(el.dataset.messages || 0) + 1);
  // Messages are applied one after another, the first once plotly.js has loaded.
  el.__queue = (el.__queue || Promise.resolve())
    .then(() => plotly())
    .then((P) => apply(P, el, data.message, setStateValue))
    .then(() => noteDrawn(el))
    .catch((err) => { el.textContent = `chart unavailable: ${err.message}`; });
}
