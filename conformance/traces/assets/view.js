"use strict";
// kpurgatory view: draws the traces embedded in this page (see conformance/traces/view.py for the data's shape).
// Every string from the data goes in with textContent (el() appends text nodes) or fillText, never as markup.

const ROLE_COLORS = {model: "#1a7f37", recording: "#bf8700", system: "#8250df"};
const KIND_COLORS = {watch: "#0969da", set_ready: "#1b7c83", check: "#2da44e", cancel_key: "#6e7781",
  force: "#8250df", try: "#3192aa", cancel: "#953800", advance: "#e16f24", shutdown: "#24292f",
  timer_add: "#0969da", timer_cancel: "#953800"};
const OTHER_COLOR = "#afb8c1";
const COMPLETES = 1, EXPIRES = 2, VIOLATES = 4, FAILED = 8, SWITCHED = 16;

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  return put(node, ...children);
}

// append children (text as text nodes), skipping null and flattening arrays
function put(node, ...children) {
  for (const child of children.flat(Infinity)) if (child !== null && child !== undefined) node.append(child);
  return node;
}

async function loadViews() {
  const text = atob(document.getElementById("kp-data").textContent.trim());
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
}

// ---- a horizontal axis with zoom and pan, shared by the time axis and the history lanes ----------------------

class Axis {
  constructor(min, max, minSpan) {
    this.min = min; this.max = Math.max(max, min + minSpan); this.minSpan = minSpan;
    this.lo = this.min; this.hi = this.max; this.left = 0; this.right = 100;
  }
  x(t) { return this.left + (t - this.lo) * (this.right - this.left) / (this.hi - this.lo); }
  t(x) { return this.lo + (x - this.left) * (this.hi - this.lo) / (this.right - this.left); }
  zoom(x, factor) {
    const at = this.t(x), span = Math.min(Math.max((this.hi - this.lo) * factor, this.minSpan), this.max - this.min);
    this.lo = at - (at - this.lo) * span / (this.hi - this.lo); this.hi = this.lo + span; this.clamp();
  }
  pan(dx) {
    const dt = dx * (this.hi - this.lo) / (this.right - this.left);
    this.lo -= dt; this.hi -= dt; this.clamp();
  }
  show(lo, hi) {
    const pad = Math.max((hi - lo) * 0.15, this.minSpan / 2);
    this.lo = lo - pad; this.hi = hi + pad; this.clamp();
  }
  fit() { this.lo = this.min; this.hi = this.max; }
  clamp() {
    const span = Math.min(this.hi - this.lo, this.max - this.min);
    if (this.lo < this.min) this.lo = this.min;
    if (this.lo + span > this.max) this.lo = this.max - span;
    this.hi = this.lo + span;
  }
}

// Wheel to zoom, drag to pan; redraw() after each change.
function interactive(canvas, axis, redraw) {
  canvas.addEventListener("wheel", (event) => {
    if (event.shiftKey) return;  // shift+wheel scrolls the rows
    event.preventDefault();
    axis.zoom(event.offsetX, event.deltaY < 0 ? 0.8 : 1.25);
    redraw();
  }, {passive: false});
  let dragging = null;
  canvas.addEventListener("mousedown", (event) => { dragging = event.clientX; });
  window.addEventListener("mouseup", () => { dragging = null; });
  window.addEventListener("mousemove", (event) => {
    if (dragging === null) return;
    axis.pan(event.clientX - dragging);
    dragging = event.clientX;
    redraw();
  });
}

function sizeCanvas(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio);
  canvas.style.width = width + "px"; canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.font = "11px ui-monospace, monospace";
  ctx.textBaseline = "middle";
  return ctx;
}

const tooltip = () => document.getElementById("tooltip");
function showTooltip(event, text) {
  const tip = tooltip();
  tip.textContent = text;
  tip.hidden = false;
  tip.style.left = Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + "px";
  tip.style.top = Math.min(event.clientY + 14, window.innerHeight - tip.offsetHeight - 8) + "px";
}
function hideTooltip() { tooltip().hidden = true; }

// ---- sequential traces ---------------------------------------------------------------------------------------

let keyHandler = null;
document.addEventListener("keydown", (event) => {
  if (keyHandler && !["INPUT", "SELECT", "TEXTAREA"].includes(event.target.tagName)) keyHandler(event);
});

function paramsText(view) {
  return Object.entries(view.params).map(([name, value]) => `${name}=${value}`).join(" ");
}

function sequentialVerdict(view) {
  if (view.error) return el("div", {class: "verdict fail", id: "verdict"}, el("p", {}, "The replay stopped: ", view.error));
  if (!view.failure) {
    const note = view.implementation === "kpurgatory.model" && !view.roles.includes("system")
      ? " This trace holds the model's answers only; replay it against a system (kpurgatory replay TRACE --impl/--adapter) to see the system's." : "";
    return el("div", {class: "verdict", id: "verdict"}, el("p", {}, `All ${view.steps.length} steps agree with the model.${note}`));
  }
  return el("div", {class: "verdict fail", id: "verdict"},
    el("p", {}, el("strong", {}, `First divergence at step ${view.failure.seq}: `), el("span", {class: "mono"}, view.failure.command)),
    view.failure.failures.map((failure, index, all) => el("p", {class: "failure"},
      `${failure.who === "system" ? "The system" : "The trace's recording"} ${failure.property === "exact" ? "differs from the model" : "breaks"} `,
      el("span", {class: "prop"}, failure.property), ": ", el("span", {class: "detail"}, failure.detail),
      // each property's words once, under its first failure
      all.findIndex((other) => other.property === failure.property) === index
        ? [el("br"), el("span", {class: "muted words"}, failure.words)] : null)));
}

function showSequential(view, main) {
  const failing = view.failure ? view.failure.seq : null;
  const list = stepList(view, (index) => select(index));
  const state = el("div", {id: "state"});
  const timeline = el("div", {class: "canvasbox", id: "timeline",
                              style: `height: ${Math.max(80, Math.min(320, 36 + 18 * view.timeline.rows.length))}px`});
  put(main,
    el("p", {class: "muted"}, `${view.profile} profile · ${paramsText(view)} · recorded answers by ${view.implementation} · level ${view.level}`),
    view.description ? el("p", {class: "clamp", id: "description"}, view.description) : null,
    sequentialVerdict(view),
    el("div", {class: "seq"}, el("div", {}, el("h2", {}, "Steps"), list.box), state),
    el("h2", {}, "Time axis"),
    el("div", {class: "legend muted"},
      el("span", {}, "one row per timer entry: added ── (until it leaves the model's timer) tick start ┃ deadline ◆; fired or completed by "),
      view.columns.map((column, index) => el("span", {}, el("span", {class: "swatch", style: `background:${ROLE_COLORS[view.roles[index]]}`}), column)),
      el("span", {}, el("span", {class: "swatch", style: "background:#cf222e"}), "early or late"),
      el("span", {}, "times in order, not to scale; wheel zooms, drag pans")),
    timeline,
    el("p", {class: "muted"}, el("kbd", {}, "←"), " ", el("kbd", {}, "→"), " step, ", el("kbd", {}, "Home"), " ",
      el("kbd", {}, "End"), " first and last, ", el("kbd", {}, "f"), " the first divergence"));
  const drawTimeline = timelineCanvas(view, timeline);
  let selected = 0;
  function select(index) {
    if (!view.steps.length) return;
    selected = Math.max(0, Math.min(view.steps.length - 1, index));
    list.show(selected);
    renderState(view, view.steps[selected], state);
    drawTimeline(selected);
  }
  keyHandler = (event) => {
    const moves = {ArrowRight: selected + 1, ArrowDown: selected + 1, ArrowLeft: selected - 1, ArrowUp: selected - 1,
                   Home: 0, End: view.steps.length - 1, f: failing ? failing - 1 : selected};
    if (event.key in moves) { event.preventDefault(); select(moves[event.key]); }
  };
  select(failing ? failing - 1 : 0);
}

// The steps, one line each; only the rows in sight exist, so a trace of 100k steps scrolls like one of ten.
function stepList(view, onSelect) {
  const ROW = 22, failing = view.failure ? view.failure.seq : null;
  const columns = `4.5em minmax(0, 2fr) repeat(${view.columns.length}, minmax(0, 1.5fr))`;
  const rows = el("div", {class: "rows"});
  const spacer = el("div", {class: "spacer", style: `height: ${view.steps.length * ROW}px`}, rows);
  const box = el("div", {class: "scroll", id: "steps", style: `height: ${(view.steps.length + 1) * ROW + 2}px`},
    el("div", {class: "steprow head", style: `grid-template-columns: ${columns}`},
      el("span", {}, "seq"), el("span", {}, "command"), view.columns.map((column) => el("span", {}, column))),
    spacer);
  let selected = 0;
  function render() {
    const first = Math.max(0, Math.floor(box.scrollTop / ROW) - 10);
    const last = Math.min(view.steps.length, first + Math.ceil((box.clientHeight || 600) / ROW) + 20);
    rows.style.top = first * ROW + "px";
    rows.replaceChildren(...view.steps.slice(first, last).map((step, k) => el("div", {
        class: "steprow step" + (step.bad.length ? " failing" : "") + (failing && step.seq > failing ? " after" : "") +
               (first + k === selected ? " selected" : ""),
        style: `grid-template-columns: ${columns}`, onclick: () => onSelect(first + k)},
      el("span", {class: "seq"}, String(step.seq)), el("span", {title: step.command}, step.command),
      step.answers.map((answer, column) => el("span", {class: step.bad.includes(column) ? "bad" : "", title: answer}, answer)))));
  }
  box.addEventListener("scroll", render);
  return {box, show(index) {
    selected = index;
    const top = index * ROW, head = ROW;  // keep the row in sight below the sticky header
    if (top < box.scrollTop) box.scrollTop = top;
    else if (top + ROW > box.scrollTop + box.clientHeight - head) box.scrollTop = top + ROW - box.clientHeight + head;
    render();
  }};
}

// long text scrolls inside its own box
function clamped(text) {
  return text.length > 200 ? el("div", {class: "clamp"}, text) : text;
}

function renderState(view, step, box) {
  box.replaceChildren(el("h2", {id: "state-title"}, `After step ${step.seq}: clock at ${step.now}`),
    el("div", {id: "answers"}, el("div", {class: "mono"}, clamped(step.command)),
      step.answers.map((answer, column) => el("div", {class: step.bad.includes(column) ? "bad" : ""},
        el("span", {class: "muted"}, view.columns[column] + ": "), el("span", {class: "mono"}, clamped(answer))))));
  if (step.state === null) {
    box.append(el("p", {class: "muted"}, `The page keeps the model's state for steps ${view.window[0]} to ${view.window[1]} only (${view.failure ? "up to the first divergence" : "the first ones"}).`));
    return;
  }
  const state = view.states[step.state];
  // a level with buckets shows its slots; a run of empty levels folds into one line
  let empty = [];
  const flush = () => {
    if (!empty.length) return;
    const [first, last] = [empty[0], empty[empty.length - 1]];
    box.append(el("details", {class: "level"}, el("summary", {}, first.index === last.index
        ? `level ${first.index + 1}: empty` : `levels ${first.index + 1}–${last.index + 1}: empty`),
      empty.map(({level, index}) => el("div", {class: "muted"}, levelText(level, index)))));
    empty = [];
  };
  state.levels.forEach((level, index) => {
    if (!level.buckets.length && index > 0) { empty.push({level, index}); return; }
    flush();
    const current = Number(BigInt(level.current) / BigInt(level.tick) % BigInt(level.size));
    const filled = new Map(level.buckets.map((bucket) => [bucket.slot, bucket]));
    const slot = (number) => {
      const bucket = filled.get(number);
      const cell = el("div", {class: "slot" + (bucket ? " filled" : "") + (number === current ? " current" : ""),
                              title: number === current ? "the slot of the level's current time" : ""},
        el("span", {class: "n"}, String(number)));
      if (bucket) cell.append(` expires ${bucket.expiration}: `,
        ...bucket.entries.map(([id, expiration]) => el("span", {class: "chip", title: `${id} expires at ${expiration}`}, `${id} @${expiration}`)));
      return cell;
    };
    const slots = level.size <= 64 ? [...Array(level.size).keys()] : level.buckets.map((bucket) => bucket.slot);
    box.append(el("div", {class: "level"}, el("div", {}, levelText(level, index) + (level.size > 64 ? " (non-empty slots only)" : "")),
      el("div", {class: "slots"}, slots.map(slot))));
  });
  flush();
  box.append(el("div", {}, el("strong", {}, "delay queue "),
    state.queue.length ? state.queue.map((expiration) => el("span", {class: "chip"}, expiration)) : el("span", {class: "muted"}, "empty")));
  if (view.profile === "purgatory") {
    box.append(el("h2", {}, "Watch lists ", el("span", {class: "muted"}, "(struck through: completed, still listed)")));
    if (!state.watchers.length) box.append(el("p", {class: "muted"}, "none"));
    for (const [key, ops] of state.watchers) {
      box.append(el("div", {class: "watchlist"}, el("strong", {}, key), " ",
        ops.map(([op, stale]) => el("span", {class: "chip" + (stale ? " stale" : ""),
                                             title: stale ? "stale: completed, still on the list" : "waiting"}, op))));
    }
  }
}

function levelText(level, index) {
  return `level ${index + 1}: tick ${level.tick} × ${level.size} slots = ${level.interval}; current time ${level.current}`;
}

function timelineCanvas(view, box) {
  const data = view.timeline, ROW = 18, TOP = 24, LABEL = 120;
  const canvas = el("canvas"), spacer = el("div");
  box.append(canvas, spacer);
  const axis = new Axis(-0.5, data.times.length - 0.5, 2);
  let selected = 0;
  function draw() {
    const width = box.clientWidth, height = box.clientHeight;
    spacer.style.height = Math.max(0, data.rows.length * ROW + TOP - height) + "px";
    const ctx = sizeCanvas(canvas, width, height);
    axis.left = LABEL; axis.right = width - 12;
    const seq = view.steps.length ? view.steps[selected].seq : 0;
    const clockAt = data.clock[selected] ?? data.start;
    // every clock value the trace reached, and the selected step's clock
    ctx.strokeStyle = "#eaeef2";
    if (axis.x(1) - axis.x(0) > 4) for (const t of new Set(data.clock)) { ctx.beginPath(); ctx.moveTo(axis.x(t), TOP); ctx.lineTo(axis.x(t), height); ctx.stroke(); }
    let lastLabel = -Infinity;
    ctx.fillStyle = "#656d76";
    for (let t = Math.max(0, Math.ceil(axis.lo)); t <= Math.min(data.times.length - 1, axis.hi); t++) {
      const x = axis.x(t), label = data.times[t], w = ctx.measureText(label).width;
      if (x - w / 2 > lastLabel + 6 && x + w / 2 < width) { ctx.fillText(label, x - w / 2, 10); lastLabel = x + w / 2; }
    }
    ctx.strokeStyle = "#cf222e"; ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(axis.x(clockAt), TOP - 6); ctx.lineTo(axis.x(clockAt), height); ctx.stroke();
    ctx.setLineDash([]);
    const first = Math.floor(box.scrollTop / ROW);
    for (let r = first; r < Math.min(data.rows.length, first + Math.ceil(height / ROW) + 1); r++) {
      const row = data.rows[r], y = TOP + (r - first) * ROW + ROW / 2;
      const current = row.step === seq || row.marks.some((mark) => mark.seq === seq);
      if (current) { ctx.fillStyle = "#ddf4ff"; ctx.fillRect(0, y - ROW / 2, width, ROW); }
      ctx.save(); ctx.beginPath(); ctx.rect(LABEL, y - ROW / 2, width - LABEL, ROW); ctx.clip();
      const end = row.ended ?? row.deadline;
      ctx.strokeStyle = "#8c959f"; ctx.lineWidth = 2;
      ctx.beginPath(); ctx.moveTo(axis.x(row.added), y); ctx.lineTo(axis.x(Math.max(end, row.added)), y); ctx.stroke();
      ctx.lineWidth = 1;
      ctx.strokeStyle = "#0969da"; ctx.beginPath(); ctx.moveTo(axis.x(row.tick), y - 7); ctx.lineTo(axis.x(row.tick), y + 7); ctx.stroke();
      const dx = axis.x(row.deadline);
      ctx.fillStyle = "#24292f"; ctx.beginPath();
      ctx.moveTo(dx, y - 5); ctx.lineTo(dx + 5, y); ctx.lineTo(dx, y + 5); ctx.lineTo(dx - 5, y); ctx.fill();
      for (const mark of row.marks) {
        const x = axis.x(mark.time) + (mark.column - 1) * 3, my = y + (mark.column - 1) * 3;
        ctx.beginPath(); ctx.arc(x, my, 4, 0, 2 * Math.PI);
        ctx.fillStyle = mark.early ? "#cf222e" : ROLE_COLORS[view.roles[mark.column]];
        if (mark.column === 0 || mark.early) ctx.fill();
        else { ctx.lineWidth = 2; ctx.strokeStyle = ctx.fillStyle; ctx.stroke(); ctx.lineWidth = 1; }
      }
      if (row.late.length) {
        ctx.fillStyle = "#cf222e";
        ctx.fillText("late: " + row.late.map((column) => view.columns[column]).join(", "), dx + 8, y);
      }
      ctx.restore();
      ctx.fillStyle = current ? "#0969da" : "#1b1f24";
      ctx.fillText(`${row.label} (${row.step})`.slice(0, 18), 4, y);
    }
    if (!data.rows.length) { ctx.fillStyle = "#656d76"; ctx.fillText("no timer entries in this trace", LABEL, TOP + 10); }
  }
  interactive(canvas, axis, draw);
  box.addEventListener("scroll", draw);
  canvas.addEventListener("mousemove", (event) => {
    const row = data.rows[Math.floor(box.scrollTop / ROW) + Math.floor((event.offsetY - TOP) / ROW)];
    if (!row || event.offsetY < TOP) { hideTooltip(); return; }
    const time = (index) => data.times[index];
    const lines = [`${row.label}, scheduled in step ${row.step} at ${time(row.added)}`,
                   `tick start ${time(row.tick)}, deadline ${time(row.deadline)}` + (row.ended !== null ? `, out of the model's timer at ${time(row.ended)}` : ""),
                   ...row.marks.map((mark) => `${view.columns[mark.column]}: ${mark.kind} in step ${mark.seq} at ${time(mark.time)}${mark.early ? " (EARLY)" : ""}`),
                   ...row.late.map((column) => `${view.columns[column]}: LATE (still pending after an advance past the deadline)`)];
    showTooltip(event, lines.join("\n"));
  });
  canvas.addEventListener("mouseleave", hideTooltip);
  window.addEventListener("resize", draw);
  return (index) => { selected = index; draw(); };
}

// ---- concurrent histories ------------------------------------------------------------------------------------

function showConcurrent(view, main) {
  const calls = view.calls, n = calls.lane.length, LANE = 26, TOP = 22, LABEL = 70;
  const byLane = view.lanes.map(() => []);
  for (let i = 0; i < n; i++) byLane[calls.lane[i]].push(i);
  const lanes = byLane.map((list) => Int32Array.from(list));
  const axis = new Axis(0, view.end, 8);
  const violating = new Set(view.violations.flatMap((violation) => violation.seqs.map((seq) => seq - 1)));
  let focused = new Set();
  const canvas = el("canvas", {id: "lanes", role: "img", "aria-label": "lanes: " + view.lanes.join(", ")});
  const box = el("div", {class: "canvasbox", style: `height: ${TOP + LANE * view.lanes.length + 8}px; overflow: hidden`}, canvas);
  const properties = new Set(view.violations.map((violation) => violation.property));
  const list = el("div", {class: "scroll", id: "violations", style: "max-height: 24vh"});
  const items = view.violations.map((violation, index) => el("div", {class: "violation", onclick: () => focus(index)},
    el("span", {class: "prop"}, violation.property), ": ", violation.message,
    el("span", {class: "muted"}, ` (calls ${violation.seqs.join(", ")})`)));
  list.append(...items);
  put(main,
    el("p", {class: "muted"}, `concurrent history · ${n.toLocaleString()} calls on ${view.threads} threads · ${paramsText(view)} · by ${view.implementation}`),
    view.description ? el("p", {class: "clamp", id: "description"}, view.description) : null,
    el("div", {class: "verdict" + (view.violations.length ? " fail" : view.checked ? "" : " unchecked"), id: "verdict"},
      view.violations.length
        ? [el("p", {}, el("strong", {}, `${view.violations.length} violation${view.violations.length > 1 ? "s" : ""} of ${properties.size} propert${properties.size > 1 ? "ies" : "y"}`), " — click one to show its calls"),
           [...properties].map((property) => el("p", {}, el("span", {class: "prop"}, property), ": ",
             el("span", {class: "muted"}, view.violations.find((v) => v.property === property).words)))]
        : el("p", {}, view.checked ? "Every property holds on this history."
                                   : "Drawn unchecked (kpurgatory view --unchecked); kpurgatory check-history checks it.")),
    view.violations.length ? list : null,
    view.schedule ? el("details", {id: "schedule"},
      el("summary", {}, `run under a controlled scheduler: ${view.schedule.strategy}, seed ${view.schedule.seed}, `
        + `switching at ${view.schedule.granularity === "calls" ? "locks and calls" : "locks"}; `
        + `${view.schedule.switches.length} switch${view.schedule.switches.length === 1 ? "" : "es"} from the default order `
        + "(◆ on the call each let go on); kpurgatory replay runs it again"),
      el("ol", {}, view.schedule.switches.map((line) => el("li", {}, line)))) : null,
    el("div", {class: "toolbar"},
      el("button", {onclick: () => { axis.zoom((axis.left + axis.right) / 2, 0.5); draw(); }}, "+"),
      el("button", {onclick: () => { axis.zoom((axis.left + axis.right) / 2, 2); draw(); }}, "−"),
      el("button", {onclick: () => { axis.fit(); draw(); }}, "fit"),
      el("span", {class: "legend muted"}, " bars: invocation → return, logical time; ",
        Object.entries(KIND_COLORS).filter(([kind]) => view.kinds.includes(kind) && !kind.startsWith("timer")).map(([kind, color]) =>
          el("span", {}, el("span", {class: "swatch", style: `background:${color}`}), kind)),
        el("span", {}, el("span", {class: "swatch", style: `background:${OTHER_COLOR}`}), "read-outs"),
        el("span", {}, "▼ completes · ▲ expires · red outline: violating"))),
    box,
    el("p", {class: "muted"}, "wheel or ", el("kbd", {}, "+"), " ", el("kbd", {}, "-"), " zoom, drag or ",
      el("kbd", {}, "←"), " ", el("kbd", {}, "→"), " pan, ", el("kbd", {}, "0"), " fit, ", el("kbd", {}, "n"), " next violation; hover a call for its command and answer"));

  const kindColor = view.kinds.map((kind) => KIND_COLORS[kind] || OTHER_COLOR);
  function firstVisible(lane, lo) {  // calls of a lane never overlap, so returned grows with invoked
    let a = 0, b = lane.length;
    while (a < b) { const m = (a + b) >> 1; if (calls.returned[lane[m]] < lo) a = m + 1; else b = m; }
    return a;
  }
  function draw() {
    const width = box.clientWidth, height = box.clientHeight;
    const ctx = sizeCanvas(canvas, width, height);
    axis.left = LABEL; axis.right = width - 10;
    const span = axis.hi - axis.lo, step = niceStep(span / Math.max(1, (axis.right - axis.left) / 90));
    ctx.fillStyle = "#656d76"; ctx.strokeStyle = "#eaeef2";
    for (let t = Math.ceil(axis.lo / step) * step; t <= axis.hi; t += step) {
      const x = axis.x(t);
      ctx.fillText(String(t), x + 2, 10);
      ctx.beginPath(); ctx.moveTo(x, TOP - 4); ctx.lineTo(x, height); ctx.stroke();
    }
    const marked = [];
    lanes.forEach((lane, l) => {
      const y = TOP + l * LANE;
      ctx.fillStyle = "#1b1f24"; ctx.fillText(view.lanes[l].slice(0, 9), 4, y + LANE / 2);
      ctx.save(); ctx.beginPath(); ctx.rect(LABEL, y, width - LABEL, LANE); ctx.clip();
      let covered = -Infinity;
      for (let k = firstVisible(lane, axis.lo); k < lane.length; k++) {
        const i = lane[k];
        if (calls.invoked[i] > axis.hi) break;
        const x0 = axis.x(calls.invoked[i]), x1 = axis.x(calls.returned[i]);
        const flags = calls.flags[i];
        if (flags & VIOLATES || focused.has(i)) marked.push(i);
        if (x1 < covered) continue;  // this pixel is painted already: many calls per pixel when zoomed out
        const w = Math.max(1, x1 - x0 - (x1 - x0 > 4 ? 1 : 0));
        ctx.fillStyle = kindColor[calls.kind[i]];
        ctx.fillRect(x0, y + 4, w, LANE - 8);
        if (flags & FAILED) { ctx.strokeStyle = "#cf222e"; ctx.setLineDash([3, 2]); ctx.strokeRect(x0, y + 4, w, LANE - 8); ctx.setLineDash([]); }
        if (w > 50) { ctx.fillStyle = "#fff"; ctx.fillText(calls.command[i].slice(0, Math.floor(w / 7)), x0 + 3, y + LANE / 2); }
        if (flags & COMPLETES) triangle(ctx, x1 - 1, y + 4, 4, "#1a7f37", 1);
        if (flags & EXPIRES) triangle(ctx, x1 - 1, y + LANE - 4, 4, "#e16f24", -1);
        if (flags & SWITCHED) { ctx.fillStyle = "#8250df"; ctx.fillText("◆", x0 + 1, y + 4); }
        covered = x0 + 1;
      }
      ctx.restore();
    });
    for (const i of marked) {
      const y = TOP + calls.lane[i] * LANE, x0 = axis.x(calls.invoked[i]), x1 = axis.x(calls.returned[i]);
      // the shown violation's calls stand out; the other violating calls stay outlined, fainter
      if (focused.has(i)) { ctx.fillStyle = "rgba(207, 34, 46, 0.45)"; ctx.fillRect(x0, y + 2, Math.max(3, x1 - x0), LANE - 4); }
      ctx.strokeStyle = focused.size && !focused.has(i) ? "rgba(207, 34, 46, 0.45)" : "#cf222e";
      ctx.lineWidth = focused.has(i) ? 3 : focused.size ? 1 : 2;
      ctx.strokeRect(Math.max(LABEL, x0 - 1), y + 2, Math.max(3, x1 - x0 + 2), LANE - 4);
      ctx.lineWidth = 1;
    }
    document.body.dataset.drawn = String(Number(document.body.dataset.drawn || 0) + 1);
  }
  function triangle(ctx, x, y, size, color, down) {
    ctx.fillStyle = color; ctx.beginPath();
    ctx.moveTo(x - size, y); ctx.lineTo(x + size, y); ctx.lineTo(x, y + down * size); ctx.fill();
  }
  let current = -1;
  function focus(index) {
    current = index;
    const violation = view.violations[index];
    focused = new Set(violation.seqs.map((seq) => seq - 1));
    items.forEach((item, i) => item.classList.toggle("selected", i === index));
    items[index].scrollIntoView({block: "nearest"});
    const indices = [...focused];
    axis.show(Math.min(...indices.map((i) => calls.invoked[i])), Math.max(...indices.map((i) => calls.returned[i])));
    draw();
  }
  canvas.addEventListener("mousemove", (event) => {
    const l = Math.floor((event.offsetY - TOP) / LANE), lane = lanes[l];
    if (!lane || event.offsetX < LABEL) { hideTooltip(); return; }
    const t = axis.t(event.offsetX), slack = 3 * (axis.hi - axis.lo) / (axis.right - axis.left);
    // the call under the pointer, else the nearest one within 3 px
    const k = firstVisible(lane, t);
    const [i, distance] = [lane[k], lane[k - 1]].filter((call) => call !== undefined)
      .map((call) => [call, Math.max(0, calls.invoked[call] - t, t - calls.returned[call])])
      .sort((a, b) => a[1] - b[1])[0] || [undefined, Infinity];
    if (distance > slack) { hideTooltip(); return; }
    const mine = view.violations.filter((violation) => violation.seqs.includes(i + 1));
    showTooltip(event, [`call ${i + 1} on ${view.lanes[l]}, logical time ${calls.invoked[i]} → ${calls.flags[i] & FAILED && calls.answer[i] === "never returned" ? "…" : calls.returned[i]}`,
                        calls.command[i], "→ " + calls.answer[i],
                        ...(calls.exec_ns[i] === null ? [] : [`executed in ${(calls.exec_ns[i] / 1000).toFixed(1)} µs`]),
                        ...(view.schedule && calls.flags[i] & SWITCHED ? ["a switch of the schedule let it go on"] : []),
                        ...mine.map((violation) => `VIOLATES ${violation.property}: ${violation.message}`)].join("\n"));
  });
  canvas.addEventListener("mouseleave", hideTooltip);
  interactive(canvas, axis, draw);
  window.addEventListener("resize", draw);
  keyHandler = (event) => {
    const middle = (axis.left + axis.right) / 2, actions = {
      "+": () => axis.zoom(middle, 0.5), "=": () => axis.zoom(middle, 0.5), "-": () => axis.zoom(middle, 2),
      "0": () => axis.fit(), ArrowLeft: () => axis.pan(100), ArrowRight: () => axis.pan(-100),
      n: () => view.violations.length && focus((current + 1) % view.violations.length)};
    if (event.key in actions) { event.preventDefault(); actions[event.key](); draw(); }
  };
  draw();
}

function niceStep(raw) {
  const power = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
  return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
}

// ---- the page ------------------------------------------------------------------------------------------------

function show(view) {
  const main = document.getElementById("main");
  main.replaceChildren();
  keyHandler = null;
  document.getElementById("summary").textContent = `${view.id} · ${view.kind === "concurrent" ? "concurrent history" : "sequential trace"}`;
  document.title = `${view.id} · kpurgatory view`;
  (view.kind === "concurrent" ? showConcurrent : showSequential)(view, main);
}

loadViews().then((views) => {
  const picker = document.getElementById("trace");
  views.forEach((view, index) => picker.append(el("option", {value: String(index)},
    `${view.id} (${view.kind}${(view.failure || view.error || (view.violations || []).length) ? ", fails" : ""})`)));
  picker.hidden = views.length < 2;
  picker.addEventListener("change", () => show(views[Number(picker.value)]));
  const first = Math.max(0, views.findIndex((view) => view.failure || view.error || (view.violations || []).length));
  picker.value = String(first);
  show(views[first]);
  window.kpurgatoryRendered = performance.now();
  document.body.dataset.ready = "1";
}, (error) => {
  document.getElementById("main").replaceChildren(el("p", {class: "verdict fail"}, "Could not read the embedded traces: " + error));
});
