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
};
