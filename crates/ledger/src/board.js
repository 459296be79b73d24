"use strict";
// The key lives in this tab only: sessionStorage, never a cookie or localStorage.
const STORE = "metabob-board-key";
const GROUPS = ["open", "claimed", "pending", "closed", "withdrawn", "parked"];
const REFRESH_MS = 3000;

// A key handed in the fragment (#key=...) is taken once into the tab and removed from the URL.
(function takeFragmentKey() {
  const m = /(?:^#|&)key=([^&]*)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(STORE, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
})();

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function setStatus(text, cls) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = cls || "";
}

function detail(group, t) {
  switch (group) {
    case "claimed":
      return "held by " + t.holder + " until " + t.until + (t.lapsed ? " (lapsed)" : "");
    case "pending":
      return (t.awaiting || "pending") + (t.fix_commit ? " commit " + t.fix_commit : "") +
        (t.by ? " by " + t.by : "");
    case "closed":
      return (t.verdict || "closed") + (t.fix_commit ? " commit " + t.fix_commit : "") +
        (t.closed_by ? " by " + t.closed_by : "");
    case "withdrawn":
    case "parked":
      return "reason: " + t.reason;
    default:
      return t.severity;
  }
}

function renderRepo(repo) {
  const section = el("section", null, "repo");
  section.dataset.repository = repo.repository;
  section.appendChild(el("h2", repo.repository));
  const grid = el("div", null, "groups");
  for (const g of GROUPS) {
    const box = el("div", null, "group");
    box.dataset.group = g;
    const tasks = Array.isArray(repo[g]) ? repo[g] : [];
    box.appendChild(el("h3", g + " (" + tasks.length + ")"));
    const ul = el("ul");
    for (const t of tasks) {
      const li = el("li", null, "task" + (t.lapsed ? " lapsed" : ""));
      li.dataset.group = g;
      li.dataset.task = t.task_id;
      li.appendChild(el("span", t.task_id, "id"));
      li.appendChild(document.createTextNode(" " + t.summary + " "));
      li.appendChild(el("span", detail(g, t), "detail"));
      ul.appendChild(li);
    }
    box.appendChild(ul);
    grid.appendChild(box);
  }
  section.appendChild(grid);
  return section;
}

function renderList(id, title, items, line) {
  const section = el("section");
  section.id = id;
  section.appendChild(el("h2", title + " (" + items.length + ")"));
  const ul = el("ul");
  for (const i of items) ul.appendChild(el("li", line(i)));
  section.appendChild(ul);
  return section;
}

function render(data) {
  const board = document.getElementById("board");
  board.replaceChildren();
  for (const repo of data.repositories || []) board.appendChild(renderRepo(repo));
  board.appendChild(renderList("cells", "Cells", data.cells || [], c =>
    c.vessel_id + " last heartbeat " + (c.last_heartbeat || "never") +
    (c.holding && c.holding.length ? ", holds " + c.holding.join(", ") : "")));
  board.appendChild(renderList("goals", "Goals", data.goals || [], g =>
    g.dispatch_id + " " + g.state + ": " + g.goal));
  let note = "Updated " + data.now + " (" + data.tasks + " tasks)";
  if (data.truncated) note += "; only the newest tasks are shown";
  if (data.verdicts_truncated) note += "; older verdict rows were not read";
  setStatus(note);
}

function clearBoard() {
  document.getElementById("board").replaceChildren();
}

async function refresh() {
  const key = sessionStorage.getItem(STORE);
  if (!key) {
    clearBoard();
    setStatus("Enter an API key to see the board.");
    return;
  }
  let resp;
  try {
    resp = await fetch("/resolve", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "ApiKey " + key },
      body: JSON.stringify({ pointer: { type: "taskBoard" } }),
      cache: "no-store",
    });
  } catch (e) {
    setStatus("The ledger did not answer: " + e);
    return;
  }
  if (resp.status === 401 || resp.status === 403) {
    clearBoard();
    setStatus("key rejected", "rejected");
    return;
  }
  if (!resp.ok) {
    clearBoard();
    setStatus("The ledger answered " + resp.status + ".");
    return;
  }
  render(await resp.json());
}

document.getElementById("keyform").addEventListener("submit", ev => {
  ev.preventDefault();
  const input = document.getElementById("key");
  if (input.value.trim()) sessionStorage.setItem(STORE, input.value.trim());
  input.value = "";
  refresh();
});
document.getElementById("forget").addEventListener("click", () => {
  sessionStorage.removeItem(STORE);
  refresh();
});

refresh();
setInterval(refresh, REFRESH_MS);
