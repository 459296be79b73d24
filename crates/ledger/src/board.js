"use strict";
// The key lives in this tab only: sessionStorage, never a cookie or localStorage.
const STORE = "metabob-board-key";
const GROUPS = ["open", "blocked", "claimed", "pending", "closed", "withdrawn", "parked"];
const REFRESH_MS = 3000;
// Which actions a task's group offers; the ledger decides again (one rule) and may refuse.
const ACTIONS = { reopen: ["parked"], release: ["claimed"], cancel: ["open", "blocked", "claimed", "pending", "withdrawn", "parked"] };
// The task the detail view shows, if any.
let selected = null;

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
    case "blocked":
      return "blocked by " + (t.blocked_by || []).map(b => b.state + " " + b.task_id).join(", ");
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
      const li = el("li", null, "task" + (t.lapsed ? " lapsed" : "") +
        (t.task_id === selected ? " selected" : ""));
      li.dataset.group = g;
      li.dataset.task = t.task_id;
      li.addEventListener("click", () => showDetail(t.task_id));
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
    g.dispatch_id + " " + g.state + ": " + g.goal +
    (g.waits_for && g.waits_for.length ? " (waits for " + g.waits_for.join(", ") + ")" : "")));
  let note = "Updated " + data.now + " (" + data.tasks + " tasks)";
  if (data.truncated) note += "; only the newest tasks are shown";
  if (data.verdicts_truncated) note += "; older verdict rows were not read";
  setStatus(note);
}

function clearBoard() {
  document.getElementById("board").replaceChildren();
}

// Sends `pointer` to the ledger with the tab's key in the Authorization header (never a
// cookie): the answer's JSON, or null after saying on the board why there is none. A write
// refused with 403 is a key without the write scope, said in the detail view; the board stays.
async function ask(pointer, writing) {
  const key = sessionStorage.getItem(STORE);
  if (!key) {
    clearBoard();
    hideDetail();
    setStatus("Enter an API key to see the board.");
    return null;
  }
  let resp;
  try {
    resp = await fetch("/resolve", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "ApiKey " + key },
      body: JSON.stringify({ pointer }),
      cache: "no-store",
    });
  } catch (e) {
    setStatus("The ledger did not answer: " + e);
    return null;
  }
  if (writing && resp.status === 403) {
    detailStatus("refused: this key may only read; an action needs a key with the write scope", "refused");
    return null;
  }
  if (resp.status === 401 || resp.status === 403) {
    clearBoard();
    hideDetail();
    setStatus("key rejected", "rejected");
    return null;
  }
  if (!resp.ok) {
    let why = "";
    try { why = ": " + ((await resp.json()).detail || ""); } catch (e) { /* no JSON body */ }
    setStatus("The ledger answered " + resp.status + why);
    return null;
  }
  return resp.json();
}

async function refresh() {
  const data = await ask({ type: "taskBoard" });
  if (data) render(data);
  if (data && selected) await loadDetail();
}

function took(ms) {
  if (typeof ms !== "number") return "-";
  const s = Math.round(ms / 1000);
  return s < 60 ? s + "s" : Math.floor(s / 60) + "m " + (s % 60) + "s";
}

function hideDetail() {
  selected = null;
  document.getElementById("detail").hidden = true;
}

function detailStatus(text, cls) {
  const s = document.getElementById("detail-status");
  s.textContent = text;
  s.className = cls || "";
}

async function showDetail(id) {
  selected = id;
  detailStatus("");
  document.getElementById("reason").value = "";
  for (const li of document.querySelectorAll("li.task")) {
    li.classList.toggle("selected", li.dataset.task === id);
  }
  await loadDetail();
}

// The detail view: the task, its attempts and every row about it, as `task show` prints them
// (anchor: loadDetail).
async function loadDetail() {
  const id = selected;
  const h = await ask({ type: "taskHistory", task: id });
  if (!h || id !== selected) return;
  const box = document.getElementById("detail");
  box.hidden = false;
  box.dataset.task = id;
  const t = h.task;
  if (!t) {
    document.getElementById("detail-title").textContent = id + ": no such task for this key";
    box.dataset.group = "";
    for (const b of document.querySelectorAll("#actions button[data-action]")) b.hidden = true;
    document.getElementById("attempts").replaceChildren();
    document.getElementById("events").replaceChildren();
    return;
  }
  box.dataset.group = t.group;
  document.getElementById("detail-title").textContent =
    t.task_id + " " + t.summary + " (" + t.severity + ", " + t.group + ")";
  document.getElementById("detail-facts").textContent = "repository " + (t.repository || "-") +
    "; recorded " + t.recorded_at + " by " + (t.recorded_by || "-");
  for (const b of document.querySelectorAll("#actions button[data-action]")) {
    b.hidden = !ACTIONS[b.dataset.action].includes(t.group);
  }
  const attempts = h.attempts || [];
  document.getElementById("attempts-title").textContent = "Attempts (" + attempts.length + ")";
  document.getElementById("attempts").replaceChildren(...attempts.map(a => el("li",
    a.vessel_id + " " + a.began_at + " for " + took(a.duration_ms) + ", " + a.ending +
    (a.reason ? ": " + a.reason : ""))));
  const events = h.events || [];
  document.getElementById("events-title").textContent = "Events (" + events.length + ")";
  document.getElementById("events").replaceChildren(...events.map(e => el("li",
    e.at + " " + e.kind + (e.by ? " by " + e.by : "") + (e.detail ? ": " + e.detail : ""))));
}

// One button: the ledger decides and writes the action in one write (taskAction_write).
async function act(action) {
  const id = selected;
  if (!id) return;
  const reason = document.getElementById("reason").value.trim();
  if (action === "cancel" && !reason) {
    detailStatus("Give a reason to cancel the task.", "refused");
    return;
  }
  const pointer = { type: "taskAction_write", task: id, action };
  if (reason) pointer.reason = reason;
  const answer = await ask(pointer, true);
  if (!answer) return;
  if (answer.outcome === "done") {
    detailStatus("done: " + answer.done, "done");
    document.getElementById("reason").value = "";
  } else {
    detailStatus("refused: " + (answer.detail || answer.outcome), "refused");
  }
  await refresh();
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
for (const b of document.querySelectorAll("#actions button[data-action]")) {
  b.addEventListener("click", () => act(b.dataset.action));
}
document.getElementById("detail-close").addEventListener("click", hideDetail);

refresh();
setInterval(refresh, REFRESH_MS);
