// chongming_nb TaskTable front end (anywidget ESM, no build step).
//
// Everything about names (statuses, tones, verbs, message types) comes from the
// kernel through the `schema` trait; this file hard-codes none of it. The kernel
// computes `row.can[verb]` and a button is enabled exactly when that is true (and the
// kernel is connected). Every user string is put into the DOM with textContent.

const ROW_H = 34; // px, one task row
const DRAWER_H = 260; // px, an open log drawer under its row
const OVERSCAN = 6; // rows rendered above/below the visible window
const ACK_TTL_MS = 8000;

function h(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function pad2(n) {
  return String(n).padStart(2, "0");
}

function clockText(ms) {
  if (ms === null || ms === undefined) return "";
  const d = new Date(ms);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

function durationText(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
  let s = Math.max(0, Math.floor(seconds));
  const hh = Math.floor(s / 3600);
  s -= hh * 3600;
  const mm = Math.floor(s / 60);
  s -= mm * 60;
  return hh ? `${hh}:${pad2(mm)}:${pad2(s)}` : `${mm}:${pad2(s)}`;
}

function numText(x) {
  if (x === null || x === undefined) return "";
  if (Math.abs(x) >= 1e6) return x.toExponential(2);
  return Number.isInteger(x) ? String(x) : x.toFixed(1);
}

function recordRenderTime(ms) {
  const g = globalThis;
  if (!g.__cnRenderTimes) g.__cnRenderTimes = [];
  g.__cnRenderTimes.push(ms);
  if (g.__cnRenderTimes.length > 2000) g.__cnRenderTimes.shift();
}

function render({ model, el }) {
  const schema = model.get("schema") || {};
  const statuses = schema.statuses || [];
  const terminal = new Set(schema.terminal || []);
  const tones = schema.tones || {};
  const verbs = schema.verbs || [];
  const bulkVerbs = schema.bulk_verbs || [];
  const labels = schema.verb_labels || {};
  const actorLabels = schema.actor_labels || {};
  const statusRank = new Map(statuses.map((s, i) => [s, i]));
  const kind = model.get("kind") || "board";
  const single = kind === "task";

  // ------------------------------------------------------------------ state
  const rows = new Map(); // id -> row (kernel order preserved by insertion)
  let seq = -1;
  let lastUpdateAt = null; // epoch ms of the newest state we hold
  let syncPending = false;
  let nextRequest = 1;
  const pending = new Map(); // request_id -> {taskId, action, bulk}
  const acks = new Map(); // task_id -> {ok, text, at}
  const open = new Set(); // task ids with an open drawer
  const details = new Map(); // task_id -> detail message
  const detailAsked = new Map(); // task_id -> time of last request
  let disconnected = false;
  let filterStatus = "";
  let search = "";
  let sortKey = "";
  let sortDesc = false;
  let view = []; // filtered + sorted ids
  let viewDirty = true;
  // rows patched in place since the last paint (a painted row is redrawn when its object
  // changed or its id is here); patching in place spares a new object per update
  const changed = new Set();
  let offsets = [0];
  let bulkNote = null;
  let frame = 0;

  // ------------------------------------------------------------------ skeleton
  el.classList.add("cn-root");
  if (single) el.classList.add("cn-single");
  const root = h("div", "cn-table");
  root.setAttribute("role", "region");
  root.setAttribute("aria-label", model.get("title") || `chongming ${kind}`);
  el.appendChild(root);

  const banner = h("div", "cn-banner");
  banner.setAttribute("role", "status");
  banner.hidden = true;
  root.appendChild(banner);

  const head = h("div", "cn-head");
  const titleEl = h("span", "cn-title", model.get("title") || "");
  const summaryEl = h("span", "cn-summary");
  summaryEl.setAttribute("aria-live", "polite");
  head.append(titleEl, summaryEl);

  const toolbar = h("div", "cn-toolbar");
  const filterSel = h("select", "cn-filter");
  filterSel.setAttribute("aria-label", "Filter by status");
  filterSel.appendChild(new Option("all statuses", ""));
  filterSel.appendChild(new Option("active (not finished)", ":active"));
  filterSel.appendChild(new Option("finished", ":terminal"));
  for (const s of statuses) filterSel.appendChild(new Option(s, s));
  const searchIn = h("input", "cn-search");
  searchIn.type = "search";
  searchIn.placeholder = "search name, id, message";
  searchIn.setAttribute("aria-label", "Search tasks");
  const sortSel = h("select", "cn-sort");
  sortSel.setAttribute("aria-label", "Sort by");
  for (const [v, t] of [
    ["", "kernel order"],
    ["name", "name"],
    ["status", "status"],
    ["progress", "progress"],
    ["started", "started"],
    ["duration", "duration"],
    ["created", "created"],
  ])
    sortSel.appendChild(new Option(`sort: ${t}`, v));
  const dirBtn = h("button", "cn-btn cn-dir", "↑");
  dirBtn.type = "button";
  dirBtn.setAttribute("aria-label", "Sort direction: ascending");
  const bulkBtns = new Map();
  const bulkBox = h("span", "cn-bulk");
  for (const verb of bulkVerbs) {
    const b = h("button", "cn-btn cn-bulk-btn", `${labels[verb] || verb} all`);
    b.type = "button";
    b.dataset.bulk = verb;
    b.setAttribute("aria-label", `${labels[verb] || verb} all tasks in this table`);
    b.addEventListener("click", () => sendBulk(verb));
    bulkBtns.set(verb, b);
    bulkBox.appendChild(b);
  }
  const bulkNoteEl = h("span", "cn-bulk-note");
  bulkNoteEl.setAttribute("role", "status");
  toolbar.append(filterSel, searchIn, sortSel, dirBtn, bulkBox, bulkNoteEl);

  const colHead = h("div", "cn-row cn-colhead");
  for (const t of [
    "",
    "name",
    "status",
    "progress",
    "rate / ETA",
    "attempt",
    "started",
    "duration",
    "message",
    "actions",
  ])
    colHead.appendChild(h("span", "cn-cell", t));

  const viewport = h("div", "cn-viewport");
  viewport.tabIndex = -1;
  const spacer = h("div", "cn-spacer");
  viewport.appendChild(spacer);
  const empty = h("div", "cn-empty", "no tasks");

  if (!single) root.append(head, toolbar, colHead);
  root.append(viewport, empty);

  // ------------------------------------------------------------------ messages out
  function send(msg) {
    if (disconnected) return null;
    const rid = nextRequest++;
    msg.request_id = rid;
    model.send(msg);
    return rid;
  }

  // A click travels over the comm. If the kernel's main thread is busy (a long cell
  // and no comm subshell), the same click also goes through the server extension and
  // the store's command queue, which the kernel's dispatcher thread serves; the shared
  // key makes the kernel apply it once, whichever copy arrives first.
  const clientKey = `w${Math.random().toString(36).slice(2, 10)}`;
  const VIA_SERVER_AFTER_MS = 300;

  function pageConfig() {
    const node = document.getElementById("jupyter-config-data");
    if (!node) return null;
    try {
      return JSON.parse(node.textContent || "{}");
    } catch (_) {
      return null;
    }
  }

  function viaServer(rid, taskId, action, key) {
    const cfg = pageConfig();
    if (!cfg || !pending.has(rid)) return;
    const base = (cfg.baseUrl || "/").replace(/\/?$/, "/");
    const xsrf = (document.cookie.match(/(?:^|;\s*)_xsrf=([^;]*)/) || [])[1];
    const headers = { "Content-Type": "application/json" };
    if (xsrf) headers["X-XSRFToken"] = decodeURIComponent(xsrf);
    if (cfg.token) headers["Authorization"] = `token ${cfg.token}`;
    fetch(`${base}chongming/api/tasks/${encodeURIComponent(taskId)}/commands`, {
      method: "POST",
      credentials: "same-origin",
      headers,
      body: JSON.stringify({ verb: action, request_key: key }),
    })
      .then((r) => {
        if (!pending.has(rid)) return;
        const note = r.status === 202
          ? { ok: null, text: `${labels[action] || action}… (kernel busy: sent via the server)`, at: Date.now() }
          : null;
        if (note) {
          acks.set(taskId, note);
          scheduleRender();
        }
      })
      .catch(() => {});
  }

  function sendAction(taskId, action) {
    const key = `${clientKey}:${nextRequest}`;
    const rid = send({ type: "action", action, task_id: taskId, key });
    if (rid === null) return;
    pending.set(rid, { taskId, action });
    acks.set(taskId, { ok: null, text: `${labels[action] || action}…`, at: Date.now() });
    setTimeout(() => viaServer(rid, taskId, action, key), VIA_SERVER_AFTER_MS);
    scheduleRender();
  }

  function sendBulk(action) {
    const rid = send({ type: "bulk", action });
    if (rid === null) return;
    pending.set(rid, { bulk: true, action });
    bulkNote = { ok: null, text: `${labels[action] || action} all…`, at: Date.now() };
    scheduleRender();
  }

  function askDetail(taskId) {
    detailAsked.set(taskId, Date.now());
    send({ type: "detail", task_id: taskId });
  }

  function requestSync() {
    if (syncPending) return;
    syncPending = true;
    send({ type: "sync" });
  }

  // ------------------------------------------------------------------ state in
  function replaceAll(list, newSeq, at) {
    rows.clear();
    for (const r of list || []) rows.set(r.id, r);
    seq = newSeq;
    if (at) lastUpdateAt = at;
    viewDirty = true;
    scheduleRender();
  }

  function onTrait() {
    const s = model.get("rows_seq");
    if (typeof s === "number" && s > seq) replaceAll(model.get("rows"), s, model.get("rows_at"));
  }

  // liveness: any message from the kernel counts, and a quiet kernel pings every
  // schema.ping_ms; silence for three pings means the kernel is gone (shut down,
  // restarted or dead) as far as this view can tell
  let lastHeard = Date.now();
  let silent = false;
  const pingMs = schema.ping_ms || 5000;

  function onCustom(msg) {
    if (!msg || typeof msg !== "object") return;
    lastHeard = Date.now();
    if (silent) {
      silent = false;
      checkLive();
    }
    if (msg.type === "ping") return;
    if (msg.type === "patch") {
      if (msg.seq <= seq) return;
      if (msg.base !== seq) requestSync();
      const touched = [];
      for (const r of msg.upsert || []) {
        rows.set(r.id, r);
        touched.push(r.id);
      }
      for (const d of msg.update || []) {
        const prev = rows.get(d.id);
        if (!prev) {
          requestSync();
          continue;
        }
        Object.assign(prev, d);
        changed.add(d.id);
        if (!viewDirty && movesInView(d)) viewDirty = true;
        touched.push(d.id);
      }
      for (const id of touched)
        if (open.has(id) && Date.now() - (detailAsked.get(id) || 0) > 1000) askDetail(id);
      for (const id of msg.remove || []) rows.delete(id);
      seq = msg.seq;
      if (msg.at) lastUpdateAt = msg.at;
      if ((msg.upsert || []).length || (msg.remove || []).length) viewDirty = true;
      scheduleRender();
    } else if (msg.type === "full") {
      syncPending = false;
      if (msg.seq >= seq) replaceAll(msg.rows, msg.seq, msg.at);
    } else if (msg.type === "ack") {
      const p = pending.get(msg.request_id);
      pending.delete(msg.request_id);
      const text = msg.ok
        ? `${labels[msg.action] || msg.action || "done"}: ok${msg.reason ? ` (${msg.reason})` : ""}`
        : `refused: ${msg.reason || "unknown reason"}`;
      const note = { ok: !!msg.ok, text, at: Date.now() };
      if (p && p.bulk) bulkNote = note;
      else if (p && p.taskId) acks.set(p.taskId, note);
      else if (msg.task_id) acks.set(msg.task_id, note);
      scheduleRender();
    } else if (msg.type === "detail") {
      details.set(msg.task_id, msg);
      scheduleRender();
    }
  }

  // ------------------------------------------------------------------ connection
  function setDisconnected(flag) {
    if (flag === disconnected) return;
    disconnected = flag;
    el.classList.toggle("cn-disconnected", flag);
    scheduleRender();
  }
  function checkLive() {
    setDisconnected(silent || el.classList.contains("jupyter-widgets-disconnected"));
  }
  const classWatch = new MutationObserver(checkLive);
  classWatch.observe(el, { attributes: true, attributeFilter: ["class"] });
  const onLive = () => setTimeout(checkLive, 0);
  const onClose = () => setDisconnected(true);
  model.on("comm_live_update", onLive);
  model.on("comm:close", onClose);

  // ------------------------------------------------------------------ view model
  // does a patch of these fields change which rows are shown, or their order?
  function movesInView(d) {
    if (filterStatus && "status" in d) return true;
    if (search && ("name" in d || "message" in d || "failure" in d || "tags" in d)) return true;
    switch (sortKey) {
      case "":
        return false;
      case "name":
        return "name" in d;
      case "status":
        return "status" in d;
      case "progress":
        return "done" in d || "total" in d;
      case "started":
        return "started" in d;
      case "created":
        return "created" in d;
      default:
        return true; // duration: moves with the clock anyway
    }
  }

  function matches(r) {
    if (filterStatus === ":active" && terminal.has(r.status)) return false;
    if (filterStatus === ":terminal" && !terminal.has(r.status)) return false;
    if (filterStatus && filterStatus[0] !== ":" && r.status !== filterStatus) return false;
    if (!search) return true;
    const q = search;
    return (
      String(r.name).toLowerCase().includes(q) ||
      String(r.id).toLowerCase().includes(q) ||
      (r.message && String(r.message).toLowerCase().includes(q)) ||
      (r.failure && String(r.failure.message).toLowerCase().includes(q)) ||
      (r.tags || []).some((t) => String(t).toLowerCase().includes(q))
    );
  }

  function sortValue(r, now) {
    switch (sortKey) {
      case "name":
        return String(r.name).toLowerCase();
      case "status":
        return statusRank.has(r.status) ? statusRank.get(r.status) : 999;
      case "progress":
        return r.total ? r.done / r.total : -1;
      case "started":
        return r.started ?? -1;
      case "created":
        return r.created ?? -1;
      case "duration":
        return r.started ? (r.ended ?? now) - r.started : -1;
      default:
        return 0;
    }
  }

  function rebuildView() {
    const ids = [];
    for (const r of rows.values()) if (matches(r)) ids.push(r.id);
    if (sortKey) {
      const now = Date.now();
      const keyed = ids.map((id, i) => [sortValue(rows.get(id), now), i, id]);
      keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
      if (sortDesc) keyed.reverse();
      view = keyed.map((k) => k[2]);
    } else {
      view = sortDesc ? ids.reverse() : ids;
    }
    offsets = new Array(view.length + 1);
    offsets[0] = 0;
    for (let i = 0; i < view.length; i++)
      offsets[i + 1] = offsets[i] + ROW_H + (open.has(view[i]) ? DRAWER_H : 0);
    viewDirty = false;
  }

  function firstIndexAt(y) {
    let lo = 0;
    let hi = view.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (offsets[mid + 1] <= y) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  // ------------------------------------------------------------------ rows
  const rowEls = new Map(); // id -> refs

  function makeRow(id) {
    const wrap = h("div", "cn-item");
    const row = h("div", "cn-row");
    row.setAttribute("role", "row");
    const caret = h("button", "cn-btn cn-caret", "▸");
    caret.type = "button";
    caret.setAttribute("aria-expanded", "false");
    caret.addEventListener("click", () => toggleDrawer(id));
    const name = h("span", "cn-cell cn-name");
    const badge = h("span", "cn-badge");
    const status = h("span", "cn-cell cn-status");
    status.appendChild(badge);
    const progCell = h("span", "cn-cell cn-progress");
    const bar = h("span", "cn-bar");
    bar.setAttribute("role", "progressbar");
    bar.setAttribute("aria-valuemin", "0");
    const fill = h("span", "cn-fill");
    bar.appendChild(fill);
    const progText = h("span", "cn-progtext");
    progCell.append(bar, progText);
    const rate = h("span", "cn-cell cn-rate");
    const attempt = h("span", "cn-cell cn-attempt");
    const started = h("span", "cn-cell cn-started");
    const duration = h("span", "cn-cell cn-duration");
    const msgCell = h("span", "cn-cell cn-message");
    const msgText = h("span", "cn-msgtext");
    const ackEl = h("span", "cn-ack");
    ackEl.setAttribute("role", "status");
    msgCell.append(msgText, ackEl);
    const actions = h("span", "cn-cell cn-actions");
    const buttons = new Map();
    for (const verb of verbs) {
      const b = h("button", `cn-btn cn-act cn-act-${verb}`, labels[verb] || verb);
      b.type = "button";
      b.dataset.verb = verb;
      b.addEventListener("click", () => {
        const r = rows.get(id);
        if (!r || !r.can || !r.can[verb] || disconnected) return;
        sendAction(id, verb);
      });
      buttons.set(verb, b);
      actions.appendChild(b);
    }
    row.append(caret, name, status, progCell, rate, attempt, started, duration, msgCell, actions);
    wrap.appendChild(row);
    wrap.dataset.taskId = id;
    const refs = {
      wrap,
      row,
      caret,
      name,
      badge,
      bar,
      fill,
      progText,
      rate,
      attempt,
      started,
      duration,
      msgText,
      ackEl,
      buttons,
      drawer: null,
      last: null,
      lastDetail: null,
      lastAck: null,
      lastDisc: null,
    };
    return refs;
  }

  function liveDuration(r, now) {
    if (!r.started) return "";
    return durationText(((r.ended ?? now) - r.started) / 1000);
  }

  function updateRow(refs, r, now) {
    const ack = acks.get(r.id) || null;
    if (refs.last !== r || changed.has(r.id) || refs.lastDisc !== disconnected) {
      refs.wrap.dataset.status = r.status;
      refs.wrap.dataset.tone = tones[r.status] || "idle";
      refs.name.textContent = r.name;
      refs.name.title = `${r.name}\n${r.id}${r.tags && r.tags.length ? `\ntags: ${r.tags.join(", ")}` : ""}`;
      refs.badge.textContent = r.requested && !terminal.has(r.status) ? `${r.status} (${r.requested})` : r.status;
      refs.badge.className = `cn-badge cn-tone-${tones[r.status] || "idle"}`;
      const frac = r.total ? Math.min(1, Math.max(0, r.done / r.total)) : null;
      refs.fill.style.width = frac === null ? "0%" : `${(frac * 100).toFixed(1)}%`;
      refs.bar.classList.toggle("cn-indeterminate", frac === null && !terminal.has(r.status) && r.done > 0);
      if (frac === null) refs.bar.removeAttribute("aria-valuenow");
      else {
        refs.bar.setAttribute("aria-valuemax", String(r.total));
        refs.bar.setAttribute("aria-valuenow", String(r.done));
      }
      refs.bar.setAttribute("aria-label", `progress of ${r.name}`);
      const pt = r.total !== null && r.total !== undefined ? `${numText(r.done)}/${numText(r.total)}` : r.done ? numText(r.done) : "";
      refs.progText.textContent = pt && r.unit ? `${pt} ${r.unit}` : pt;
      const rateText = r.rate ? `${numText(r.rate)}${r.unit ? ` ${r.unit}` : ""}/s` : "";
      const etaText = r.eta !== null && r.eta !== undefined ? `ETA ${durationText(r.eta)}` : "";
      refs.rate.textContent = [rateText, etaText].filter(Boolean).join(" · ");
      refs.attempt.textContent = r.attempt ? `${r.attempt}/${r.max_attempts}` : `–/${r.max_attempts}`;
      refs.started.textContent = clockText(r.started);
      refs.started.title = r.started ? new Date(r.started).toISOString() : "";
      // who ended it and when ("stopped from the widget at 14:03:07"): not a failure
      const end = r.ended_by
        ? `${r.status} ${actorLabels[r.ended_by] || r.ended_by} at ${clockText(r.ended)}${r.end_reason ? `: ${r.end_reason}` : ""}`
        : "";
      // a delayed start: "starts at 14:05 (in 3:00)", counted down by the clock below
      const starts = r.starts ? `starts at ${clockText(r.starts).slice(0, 5)} (in ${durationText((r.starts - Date.now()) / 1000)})` : "";
      const msg = r.failure ? `${r.failure.kind}: ${r.failure.message}` : end || starts || r.message || "";
      refs.msgText.textContent = msg;
      refs.msgText.title = msg;
      refs.msgText.classList.toggle("cn-failure", !!r.failure);
      for (const [verb, b] of refs.buttons) {
        const allowed = !!(r.can && r.can[verb]) && !disconnected;
        b.disabled = !allowed;
        const label = labels[verb] || verb;
        b.setAttribute("aria-label", `${label} task ${r.name}`);
        b.title = allowed
          ? `${label} ${r.name}`
          : disconnected
            ? "disconnected from the kernel"
            : `${label} is not possible while ${r.status}`;
      }
      refs.last = r;
      refs.lastDisc = disconnected;
    }
    refs.duration.textContent = liveDuration(r, now);
    if (refs.lastAck !== ack) {
      refs.ackEl.textContent = ack ? ack.text : "";
      refs.ackEl.className = `cn-ack${ack ? (ack.ok === null ? " cn-ack-wait" : ack.ok ? " cn-ack-ok" : " cn-ack-bad") : ""}`;
      refs.lastAck = ack;
    }
    const isOpen = open.has(r.id);
    refs.caret.setAttribute("aria-expanded", String(isOpen));
    refs.caret.setAttribute("aria-label", `${isOpen ? "Hide" : "Show"} log and traceback of ${r.name}`);
    refs.caret.textContent = isOpen ? "▾" : "▸";
    if (isOpen) {
      if (!refs.drawer) {
        refs.drawer = makeDrawer(r.id);
        refs.wrap.appendChild(refs.drawer.node);
      }
      const d = details.get(r.id) || null;
      if (refs.lastDetail !== d) {
        fillDrawer(refs.drawer, r, d);
        refs.lastDetail = d;
      }
    } else if (refs.drawer) {
      refs.drawer.node.remove();
      refs.drawer = null;
      refs.lastDetail = null;
    }
  }

  function makeDrawer(id) {
    const node = h("div", "cn-drawer");
    node.setAttribute("role", "region");
    const bar = h("div", "cn-drawer-bar");
    const refresh = h("button", "cn-btn", "Refresh");
    refresh.type = "button";
    refresh.setAttribute("aria-label", "Refresh log");
    refresh.addEventListener("click", () => askDetail(id));
    const close = h("button", "cn-btn", "Close");
    close.type = "button";
    close.setAttribute("aria-label", "Close log drawer");
    close.addEventListener("click", () => toggleDrawer(id));
    bar.append(refresh, close);
    const body = h("div", "cn-drawer-body");
    node.append(bar, body);
    return { node, body };
  }

  function fillDrawer(drawer, r, d) {
    drawer.node.setAttribute("aria-label", `log of ${r.name}`);
    drawer.body.replaceChildren();
    if (!d) {
      drawer.body.appendChild(h("div", "cn-muted", disconnected ? "no log loaded" : "loading…"));
      return;
    }
    const failure = d.failure || r.failure;
    if (failure) {
      const det = h("details", "cn-tb");
      det.open = true;
      det.appendChild(h("summary", "cn-failure", `${failure.kind}: ${failure.message}`));
      if (d.traceback) det.appendChild(h("pre", "cn-pre", d.traceback));
      drawer.body.appendChild(det);
    }
    const logs = d.logs || [];
    if (!logs.length) drawer.body.appendChild(h("div", "cn-muted", "no log lines"));
    else {
      const pre = h("pre", "cn-pre cn-log");
      pre.textContent = logs
        .map((l) => `${clockText(l.at)} ${l.stream}${l.level ? ` ${l.level}` : ""}  ${l.line}`)
        .join("\n");
      drawer.body.appendChild(pre);
    }
  }

  function toggleDrawer(id) {
    if (open.has(id)) open.delete(id);
    else {
      open.add(id);
      askDetail(id);
    }
    viewDirty = true;
    scheduleRender();
  }

  // ------------------------------------------------------------------ paint
  function paintHeader() {
    const counts = new Map();
    for (const r of rows.values()) counts.set(r.status, (counts.get(r.status) || 0) + 1);
    const parts = [];
    for (const s of statuses) if (counts.get(s)) parts.push(`${counts.get(s)} ${s}`);
    summaryEl.textContent = `${rows.size} task${rows.size === 1 ? "" : "s"}${parts.length ? `: ${parts.join(", ")}` : ""}${view.length !== rows.size ? ` (showing ${view.length})` : ""}`;
    for (const [verb, b] of bulkBtns) {
      let any = false;
      for (const r of rows.values())
        if (r.can && r.can[verb]) {
          any = true;
          break;
        }
      b.disabled = !any || disconnected;
    }
    if (bulkNote && bulkNote.ok !== null && Date.now() - bulkNote.at > ACK_TTL_MS) bulkNote = null;
    bulkNoteEl.textContent = bulkNote ? bulkNote.text : "";
    bulkNoteEl.className = `cn-bulk-note${bulkNote ? (bulkNote.ok === null ? " cn-ack-wait" : bulkNote.ok ? " cn-ack-ok" : " cn-ack-bad") : ""}`;
    banner.hidden = !disconnected;
    banner.textContent = disconnected
      ? `disconnected — state as of ${clockText(lastUpdateAt ?? Date.now())}`
      : "";
  }

  function paint() {
    frame = 0;
    const t0 = performance.now();
    const now = Date.now();
    for (const [id, a] of acks) if (a.ok !== null && now - a.at > ACK_TTL_MS) acks.delete(id);
    if (viewDirty) rebuildView();
    paintHeader();
    empty.hidden = view.length > 0;
    empty.textContent = rows.size ? "no task matches the filter" : "no tasks";
    const total = offsets[view.length];
    spacer.style.height = `${total}px`;
    let first = 0;
    let last = view.length;
    if (!single) {
      const top = viewport.scrollTop;
      const height = viewport.clientHeight || 400;
      first = Math.max(0, firstIndexAt(top) - OVERSCAN);
      last = Math.min(view.length, firstIndexAt(top + height) + 1 + OVERSCAN);
    }
    const keep = new Set();
    for (let i = first; i < last; i++) {
      const id = view[i];
      const r = rows.get(id);
      let refs = rowEls.get(id);
      if (!refs) {
        refs = makeRow(id);
        rowEls.set(id, refs);
      }
      updateRow(refs, r, now);
      refs.wrap.style.top = `${offsets[i]}px`;
      refs.wrap.style.height = `${offsets[i + 1] - offsets[i]}px`;
      refs.wrap.dataset.index = String(i);
      if (refs.wrap.parentNode !== spacer) spacer.appendChild(refs.wrap);
      keep.add(id);
    }
    for (const [id, refs] of rowEls) {
      if (!keep.has(id)) {
        if (refs.wrap.contains(document.activeElement)) viewport.focus();
        refs.wrap.remove();
        rowEls.delete(id);
      }
    }
    changed.clear();
    el.dataset.rendered = String(keep.size);
    el.dataset.seq = String(seq);
    recordRenderTime(performance.now() - t0);
  }

  function scheduleRender() {
    if (frame) return;
    frame = requestAnimationFrame(paint);
  }

  // ------------------------------------------------------------------ wiring
  filterSel.addEventListener("change", () => {
    filterStatus = filterSel.value;
    viewDirty = true;
    scheduleRender();
  });
  searchIn.addEventListener("input", () => {
    search = searchIn.value.trim().toLowerCase();
    viewDirty = true;
    scheduleRender();
  });
  sortSel.addEventListener("change", () => {
    sortKey = sortSel.value;
    viewDirty = true;
    scheduleRender();
  });
  dirBtn.addEventListener("click", () => {
    sortDesc = !sortDesc;
    dirBtn.textContent = sortDesc ? "↓" : "↑";
    dirBtn.setAttribute("aria-label", `Sort direction: ${sortDesc ? "descending" : "ascending"}`);
    viewDirty = true;
    scheduleRender();
  });
  viewport.addEventListener("scroll", scheduleRender, { passive: true });

  model.on("msg:custom", onCustom);
  model.on("change:rows_seq", onTrait);
  model.on("change:rows", onTrait);
  const ticker = setInterval(() => {
    if (!silent && Date.now() - lastHeard > 3 * pingMs) {
      silent = true;
      checkLive();
    }
    if (!disconnected) scheduleRender(); // durations tick, old acks fade
  }, 1000);

  replaceAll(model.get("rows"), model.get("rows_seq") ?? 0, model.get("rows_at"));
  checkLive();
  paint();

  return () => {
    clearInterval(ticker);
    if (frame) cancelAnimationFrame(frame);
    classWatch.disconnect();
    model.off("msg:custom", onCustom);
    model.off("change:rows_seq", onTrait);
    model.off("change:rows", onTrait);
    model.off("comm_live_update", onLive);
    model.off("comm:close", onClose);
  };
}

export default { render };
