/* The audit page: the stream's events as they come (server-sent events), newest on top. */
"use strict";
(function () {
  const state = document.getElementById("stream-state");
  const body = document.getElementById("events");
  const kept = 2000;
  const source = new EventSource(state.dataset.source);

  source.addEventListener("open", () => {
    state.textContent = "live: new events appear at the top";
    state.dataset.live = "true";
  });
  source.addEventListener("audit", (message) => {
    const event = JSON.parse(message.data);
    const row = document.createElement("tr");
    row.className = "fresh";
    row.dataset.offset = String(event.offset);
    row.dataset.type = event.type;
    row.append(
      ltm.cell(event.time),
      ltm.cell(event.type),
      ltm.cell(event.memory),
      ltm.cell(event.revision),
      ltm.cell(event.tool_call),
      ltm.cell(event.details),
    );
    body.prepend(row);
    while (body.rows.length > kept) body.deleteRow(-1);
  });
  source.addEventListener("problem", (message) => {
    state.textContent = message.data;
    source.close();
  });
  source.addEventListener("error", () => {
    state.textContent = "reconnecting…";
    state.dataset.live = "false";
  });
})();
