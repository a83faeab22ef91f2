/* The overview: tiles, queue table and charts, from /overview.json every few seconds. */
"use strict";
(function () {
  const updated = document.getElementById("updated");
  const problems = document.getElementById("problems");
  const refreshMs = Number(updated.dataset.refreshMs) || 5000;
  const palette = ["#1f6feb", "#c9302c", "#1a7f37", "#8250df", "#bf8700", "#0a7ea4", "#d1242f", "#57606a"];
  const charts = {};

  function draw(id, xs, named, opts) {
    const element = document.getElementById(id);
    let names = Object.keys(named);
    if (names.length === 0) {
      names = ["none"];
      named = { none: xs.map(() => null) };
    }
    const key = names.join("\u0000");
    const data = [xs, ...names.map((name) => named[name])];
    const existing = charts[id];
    if (existing && existing.key === key) {
      existing.plot.setData(data);
      return;
    }
    if (existing) existing.plot.destroy();
    const plot = new uPlot(
      {
        width: Math.max(element.clientWidth, 300),
        height: 200,
        tzDate: ltm.utc,
        scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max || 0, opts.floor)] } },
        // Ticks and the legend in UTC, as every time the console shows: HH:MM (HH:MM:SS for
        // the broker's samples, seconds apart), the legend's time in full.
        axes: [
          { values: (u, ticks) => ticks.map((t) => ltm.time(t).slice(11, opts.seconds ? 19 : 16)) },
          { size: 56 },
        ],
        series: [
          { label: "UTC", value: (u, v) => (v === null || v === undefined ? "–" : ltm.time(v)) },
          ...names.map((name, i) => ({
            label: name,
            stroke: palette[i % palette.length],
            width: 1.5,
            // A minute with calls between quiet ones is a point, not a line to nowhere.
            points: { show: true, size: 4 },
            value: (u, v) => (v === null || v === undefined ? "–" : v.toFixed(opts.digits)),
          })),
        ],
      },
      data,
      element,
    );
    charts[id] = { key, plot };
  }

  function showTiles(tiles) {
    for (const element of document.querySelectorAll("[data-tile]")) {
      element.textContent = ltm.shown(tiles[element.dataset.tile]);
    }
  }

  function showQueues(queues) {
    const body = document.getElementById("queues");
    body.replaceChildren(
      ...queues.map((queue) => {
        const row = document.createElement("tr");
        const name = document.createElement("td");
        const code = document.createElement("code");
        code.textContent = queue.name;
        name.append(code);
        if (!queue.exists) name.append(" (does not exist)");
        row.append(name, ltm.cell(queue.messages, "number"), ltm.cell(queue.consumers, "number"));
        return row;
      }),
    );
  }

  async function refresh() {
    try {
      const response = await fetch("/overview.json", { credentials: "same-origin" });
      if (response.status === 401) {
        window.location.assign("/login?next=%2F");
        return;
      }
      const snapshot = await response.json();
      showTiles(snapshot.tiles);
      showQueues(snapshot.queues);
      const s = snapshot.series;
      draw("chart-status", s.minutes, s.by_status, { digits: 2, floor: 0.1 });
      draw("chart-tool", s.minutes, s.by_tool, { digits: 2, floor: 0.1 });
      draw("chart-latency", s.minutes, { p50: s.p50_ms, p99: s.p99_ms }, { digits: 1, floor: 10 });
      draw("chart-outbox", s.minutes, { backlog: s.outbox_backlog }, { digits: 0, floor: 5 });
      // The audit stream keeps every event (its count only grows): on a chart of its own, so
      // that the queues' few messages stay visible.
      const stream = document.getElementById("chart-audit").dataset.stream;
      const queues = Object.fromEntries(Object.entries(s.queue_messages).filter(([name]) => name !== stream));
      const audit = stream in s.queue_messages ? { [stream]: s.queue_messages[stream] } : {};
      draw("chart-queues", s.samples, queues, { digits: 0, floor: 5, seconds: true });
      draw("chart-audit", s.samples, audit, { digits: 0, floor: 5, seconds: true });
      const failing = Object.entries(snapshot.problems);
      problems.hidden = failing.length === 0;
      problems.textContent = failing.map(([source, error]) => `${source} did not answer: ${error}`).join("; ");
      updated.textContent = "updated " + ltm.time(snapshot.at);
      updated.dataset.at = String(snapshot.at);
    } catch (error) {
      updated.textContent = "could not refresh: " + error;
    }
    window.setTimeout(refresh, refreshMs);
  }

  refresh();
})();
