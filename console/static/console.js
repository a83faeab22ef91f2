/* Helpers the console's pages share. No library: text only ever goes in as text. */
"use strict";
window.ltm = {
  cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "–" : String(text);
    if (className) td.className = className;
    return td;
  },
  shown(value) {
    return value === null || value === undefined ? "–" : String(value);
  },
  // A time as every page shows it (operators.display.shown_time): RFC 3339 in UTC, to the
  // second, with a Z.
  time(seconds) {
    return new Date(seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z");
  },
  // For uPlot's time axes: the same UTC, not the browser's time zone.
  utc(seconds) {
    return uPlot.tzDate(new Date(seconds * 1000), "Etc/UTC");
  },
};
