// A finding's plot: levels, dog events and the rule's progress, drawn as SVG from the JSON
// that /cases/C/findings/L/data returns (downsampled in InfluxDB with GROUP BY time). Dragging
// across the plot or the zoom buttons ask again for the new range, at a finer interval.
"use strict";

// Round ticks at an even step of 1, 2 or 5 times a power of ten, at most `most` of them, inside
// [lo, hi]: 0-8.4 min gives 0, 2, 4, 6, 8 (analyzer/reports/ticks.py chooses the report's the
// same way; tests/test_report_print.py runs both on the same axes).
function niceTicks(lo, hi, most) {
  if (!(hi > lo)) return [lo];
  const span = hi - lo;
  const power = Math.pow(10, Math.floor(Math.log10(span / most)));
  let step = 10 * power;
  search: for (const scale of [1, 10, 100]) {
    for (const multiple of [1, 2, 5]) {
      if (Math.floor(span / (multiple * power * scale) + 1e-9) + 1 <= most) {
        step = multiple * power * scale;
        break search;
      }
    }
  }
  const decimals = Math.max(0, -Math.floor(Math.log10(step)));
  const ticks = [];
  for (let k = Math.ceil(lo / step - 1e-9); k <= Math.floor(hi / step + 1e-9); k++) {
    ticks.push(Number((k * step).toFixed(decimals)) + 0);
  }
  return ticks;
}

// Clock steps a time axis may take, in seconds: each a whole number of the unit above.
const TIME_STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
  21600, 43200, 86400, 172800, 604800];

// Evenly spaced ticks (ms) at the smallest clock step that gives at most `most` in
// [from, to]; they fall on whole minutes, hours or days of local time, whose offset from UTC is
// offsetMs (Chicago: -5 h in summer). Returns { step_s, ticks }.
function timeTicks(from, to, most, offsetMs) {
  const span_s = (to - from) / 1000;
  const step_s = TIME_STEPS_S.find((s) => Math.floor(span_s / s) + 1 <= most) ||
    Math.ceil(span_s / most / 604800) * 604800;
  const step = step_s * 1000;
  const ticks = [];
  for (let t = Math.ceil((from + offsetMs) / step) * step - offsetMs; t <= to; t += step) {
    ticks.push(t);
  }
  return { step_s: step_s, ticks: ticks };
}

if (typeof module !== "undefined") module.exports = { niceTicks, timeTicks, TIME_STEPS_S };

(function () {
  if (typeof document === "undefined") return;
  const holder = document.getElementById("plot");
  if (!holder) return;
  const plot = JSON.parse(holder.dataset.plot);
  const svg = document.getElementById("plot-svg");
  const status = document.getElementById("plot-status");
  const NS = "http://www.w3.org/2000/svg";
  const W = 1000, LEFT = 60, RIGHT = 985;
  const PANELS = {
    level: { top: 20, bottom: 230, title: "LAeq (mean) and LAFmax (max) per interval, dB" },
    events: { top: 270, bottom: 360,
              title: "Dog events: dark plainly audible at 100 ft, light judged not, " +
                     "hatched not assessed" },
    progress: { top: 400, bottom: 520, title: "The rule's progress, minutes" },
  };
  const chicago = new Intl.DateTimeFormat("en-US", {
    timeZone: "America/Chicago", hour: "2-digit", minute: "2-digit", second: "2-digit",
    hour12: false });
  const chicagoDay = new Intl.DateTimeFormat("en-US", {
    timeZone: "America/Chicago", month: "short", day: "numeric", hour: "2-digit",
    minute: "2-digit", hour12: false, timeZoneName: "short" });
  const chicagoParts = new Intl.DateTimeFormat("en-US", {
    timeZone: "America/Chicago", year: "numeric", month: "numeric", day: "numeric",
    hour: "numeric", minute: "numeric", second: "numeric", hourCycle: "h23" });
  const chicagoMinute = new Intl.DateTimeFormat("en-US", {
    timeZone: "America/Chicago", hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  const chicagoDate = new Intl.DateTimeFormat("en-US", {
    timeZone: "America/Chicago", month: "short", day: "numeric" });
  const chicagoDateHour = new Intl.DateTimeFormat("en-US", {
    timeZone: "America/Chicago", month: "short", day: "numeric", hour: "2-digit",
    minute: "2-digit", hourCycle: "h23" });
  // Chicago's offset from UTC at t, ms (its wall clock read as if it were UTC, less t).
  function chicagoOffsetMs(t) {
    const p = {};
    for (const part of chicagoParts.formatToParts(new Date(t))) p[part.type] = Number(part.value);
    const wall = Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second);
    return wall - Math.floor(t / 1000) * 1000;
  }
  let range = { from: plot.start_ms, to: plot.end_ms };
  let request = 0;

  function el(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    svg.appendChild(node);
    return node;
  }
  const x = (t) => LEFT + (t - range.from) / (range.to - range.from) * (RIGHT - LEFT);
  const tAt = (px) => range.from + (px - LEFT) / (RIGHT - LEFT) * (range.to - range.from);

  function scale(values, panel, floor) {
    let lo = Math.min(...values), hi = Math.max(...values);
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (floor !== undefined) lo = Math.min(lo, floor);
    if (hi - lo < 1) hi = lo + 1;
    const pad = (hi - lo) * 0.05;
    lo -= pad; hi += pad;
    return { y: (v) => panel.bottom - (v - lo) / (hi - lo) * (panel.bottom - panel.top), lo, hi };
  }

  function axes(panel, s, unit) {
    el("line", { class: "axis", x1: LEFT, y1: panel.bottom, x2: RIGHT, y2: panel.bottom });
    el("line", { class: "axis", x1: LEFT, y1: panel.top, x2: LEFT, y2: panel.bottom });
    el("text", { x: LEFT, y: panel.top - 6 }, panel.title);
    if (s) {
      for (const v of niceTicks(s.lo, s.hi, 5)) {
        el("line", { class: "tick", x1: LEFT - 4, x2: LEFT, y1: s.y(v), y2: s.y(v) });
        el("text", { class: "value-tick", x: LEFT - 6, y: s.y(v) + 4, "text-anchor": "end" },
           String(v) + unit);
      }
    }
  }

  // Round clock times at an even step; a label that would run past the plot's edge is left
  // out rather than cut.
  function timeAxis() {
    const { step_s, ticks } = timeTicks(range.from, range.to, 8, chicagoOffsetMs(range.from));
    const format = step_s >= 86400 ? chicagoDate : step_s >= 21600 ? chicagoDateHour :
      step_s >= 60 ? chicagoMinute : chicago;
    for (const t of ticks) {
      const label = format.format(new Date(t));
      const half = label.length * 3.6; // 12 px text: about 7.2 px a character
      if (x(t) - half < 0 || x(t) + half > W) continue;
      for (const panel of Object.values(PANELS)) {
        el("line", { class: "tick", x1: x(t), x2: x(t), y1: panel.bottom, y2: panel.bottom + 4 });
      }
      el("text", { class: "time-tick", x: x(t), y: 545, "text-anchor": "middle" }, label);
    }
  }

  function path(points, interval_ms, cls, s, index) {
    // A gap in the data (no frame stored) breaks the line rather than bridging it.
    let d = "", last = null;
    for (const p of points) {
      if (p[index] === null) continue;
      const move = last === null || p[0] - last > 1.5 * interval_ms;
      d += (move ? "M" : "L") + x(p[0]).toFixed(1) + "," + s.y(p[index]).toFixed(1);
      last = p[0];
    }
    if (d) el("path", { class: cls, d: d });
  }

  // Events not assessed: hatched, so that in grey print they stay apart from the dark
  // (plainly audible) and the light (judged not plainly audible) ones.
  function hatch() {
    const defs = el("defs", {});
    const pattern = document.createElementNS(NS, "pattern");
    for (const [k, v] of Object.entries({ id: "hatch-unassessed", width: 6, height: 6,
      patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" })) {
      pattern.setAttribute(k, v);
    }
    const line = document.createElementNS(NS, "line");
    for (const [k, v] of Object.entries({ x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#555",
      "stroke-width": 2.5 })) {
      line.setAttribute(k, v);
    }
    pattern.appendChild(line);
    defs.appendChild(pattern);
  }

  function draw(data) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    hatch();
    const interval_ms = data.interval_s * 1000;
    for (const edge of [plot.finding_start_ms, plot.finding_end_ms]) {
      if (edge >= range.from && edge <= range.to) {
        el("line", { class: "finding-edge", x1: x(edge), x2: x(edge), y1: 15, y2: 525 });
      }
    }
    const levelValues = data.levels.flatMap((p) => [p[1], p[2]]).filter((v) => v !== null);
    const ls = scale(levelValues, PANELS.level);
    axes(PANELS.level, ls, "");
    path(data.levels, interval_ms, "level-max", ls, 2);
    path(data.levels, interval_ms, "level-mean", ls, 1);

    axes(PANELS.events, null, "");
    const ev = PANELS.events;
    if (data.event_counts.length) {
      const most = Math.max(...data.event_counts.map((c) => c[1]), 1);
      for (const [t, n] of data.event_counts) {
        const h = n / most * (ev.bottom - ev.top);
        el("rect", { class: "count", x: x(t), y: ev.bottom - h,
                     width: Math.max(1, x(t + interval_ms) - x(t) - 0.5), height: h });
      }
      el("text", { x: RIGHT, y: ev.top - 6, "text-anchor": "end" },
         "events per " + data.interval_s + " s (max " + most + ")");
    }
    for (const e of data.events) {
      const x0 = x(e.onset_ms), x1 = Math.max(x(e.offset_ms), x0 + 1.5);
      const cls = e.plainly_audible === true ? "event audible" :
        e.plainly_audible === false ? "event inaudible" : "event unassessed";
      el("rect", { class: cls, x: x0, y: ev.top, width: x1 - x0, height: ev.bottom - ev.top })
        .appendChild(document.createElementNS(NS, "title")).textContent =
          e.label + " " + chicagoDay.format(new Date(e.onset_ms)) + ", " + e.laeq_db + " dB";
      el("rect", { class: cls, x: x0, y: PANELS.level.bottom - 8, width: x1 - x0, height: 8 });
    }

    const index = plot.rule === "continuous" ? 1 : 2;
    const limit_min = plot.limit_s === null ? null : plot.limit_s / 60;
    const minutes = data.progress.map((p) => [p[0], p[1] / 60, p[2] / 60]);
    const values = minutes.map((p) => p[index]).concat(limit_min === null ? [] : [limit_min]);
    const ps = scale(values, PANELS.progress, 0);
    axes(PANELS.progress, ps, "");
    // The analyzer stores the progress every 10 s of capture time (docs/WIRE.md, "MQTT topics").
    path(minutes, Math.max(interval_ms, 10000), "progress", ps, index);
    if (limit_min !== null) {
      el("line", { class: "limit", x1: LEFT, x2: RIGHT, y1: ps.y(limit_min), y2: ps.y(limit_min) });
      el("text", { x: RIGHT, y: ps.y(limit_min) - 4, "text-anchor": "end" },
         "more than " + limit_min + " min (" + plot.rule + ")");
    }
    timeAxis();
    const shown = data.events.length || data.event_counts.reduce((a, c) => a + c[1], 0);
    svg.dataset.intervalS = String(data.interval_s);
    svg.dataset.levelBuckets = String(data.levels.length);
    status.textContent = chicagoDay.format(new Date(range.from)) + " to " +
      chicagoDay.format(new Date(range.to)) + " · interval " + data.interval_s + " s · " +
      data.levels.length + " level points" +
      (data.level_points === null ? "" : " from " + data.level_points + " frames") + " · " +
      shown + " events";
  }

  function load() {
    const mine = ++request;
    status.textContent = "loading…";
    const url = plot.url + "?from=" + Math.round(range.from) + "&to=" + Math.round(range.to);
    fetch(url, { credentials: "same-origin" })
      .then((r) => {
        // 503: too many plot requests at once (the server's [limits]); the next zoom may pass.
        if (r.status === 503) throw new Error("the server is busy with other plots; zoom or pan again in a moment");
        if (!r.ok) throw new Error("the server answered " + r.status);
        return r.json();
      })
      .then((data) => { if (mine === request) draw(data); })
      .catch((err) => { if (mine === request) status.textContent = "could not load: " + err.message; });
  }

  function zoomTo(from, to) {
    const min = 10000, max = 31 * 86400000; // 10 s (a frame is 1 s) to the server's 31 days
    const mid = (from + to) / 2;
    if (to - from < min) { from = mid - min / 2; to = mid + min / 2; }
    if (to - from > max) { from = mid - max / 2; to = mid + max / 2; }
    range = { from: from, to: to };
    load();
  }

  let dragFrom = null, band = null;
  const svgX = (event) => {
    const box = svg.getBoundingClientRect();
    return (event.clientX - box.left) / box.width * W;
  };
  svg.addEventListener("mousedown", (event) => {
    dragFrom = Math.max(LEFT, Math.min(RIGHT, svgX(event)));
    band = el("rect", { class: "selection", x: dragFrom, y: 15, width: 0, height: 510 });
  });
  svg.addEventListener("mousemove", (event) => {
    if (dragFrom === null) return;
    const now = Math.max(LEFT, Math.min(RIGHT, svgX(event)));
    band.setAttribute("x", Math.min(dragFrom, now));
    band.setAttribute("width", Math.abs(now - dragFrom));
  });
  window.addEventListener("mouseup", (event) => {
    if (dragFrom === null) return;
    const to = Math.max(LEFT, Math.min(RIGHT, svgX(event)));
    const a = Math.min(dragFrom, to), b = Math.max(dragFrom, to);
    dragFrom = null;
    if (band) { band.remove(); band = null; }
    if (b - a > 5) zoomTo(tAt(a), tAt(b));
  });
  document.getElementById("zoom-in").addEventListener("click", () => {
    const quarter = (range.to - range.from) / 4;
    zoomTo(range.from + quarter, range.to - quarter);
  });
  document.getElementById("zoom-out").addEventListener("click", () => {
    const half = (range.to - range.from) / 2;
    zoomTo(range.from - half, range.to + half);
  });
  document.getElementById("zoom-reset").addEventListener("click", () => {
    zoomTo(plot.start_ms, plot.end_ms);
  });
  load();
})();
