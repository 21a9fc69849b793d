"""``TaskTable``: the one anywidget model behind every task row, run table and board.

Rows are data; buttons are drawn by the front end (``static/widget.js``). Clicks arrive
as custom messages (see :mod:`chongming_nb.notebook.schema`), possibly on a kernel
subshell thread while a cell runs, and are validated, applied with
``ctl.apply(task_id, verb, actor="widget")`` and acknowledged.

Updates: ``ctl.watch`` callbacks (any thread) only mark rows dirty and, once per flush,
ask the flush thread for a flush. A flush reads the dirty tasks' snapshots and sends a
versioned patch with the fields that really changed; a row whose snapshot differs only
in progress (the usual case) has just its progress fields recomputed. Flushes are
rate-limited to ``max_rate`` per second per widget. The ``rows`` trait (full state,
for page reloads and saved widget state) is refreshed at a lower, size-dependent rate,
and ``get_state`` always answers with the current rows.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anywidget
import traitlets

from chongming_nb.core.errors import TaskNotFound
from chongming_nb.core.models import TaskSnapshot
from chongming_nb.core.states import TaskStatus
from chongming_nb.notebook import schema as S
from chongming_nb.notebook._subshell import route_to_sender
from chongming_nb.notebook.older import (
    Older,
    add_counts,
    ctl_now,
    departed_status,
    initial_snapshots,
    kept_finished,
    status_matches,
    where_hint,
)
from chongming_nb.notebook.outputs import Publisher, TableOutputs, publish_update
from chongming_nb.notebook.requests import TableRequests
from chongming_nb.notebook.rows import (
    RateTracker,
    build_row,
    clip,
    controller_pauses,
    epoch_ms,
    progress_fields,
    status_key,
    summarize,
)

log = logging.getLogger("chongming_nb.notebook")

_STATIC = Path(__file__).parent / "static"

#: What a table shows when its front end was never built (a checkout installed without
#: the labextension build): the reason and the way out, instead of an import error.
UNBUILT_ESM = """\
export default {
  render({ el }) {
    el.textContent = "chongming_nb: the task widget's front end " +
      "(chongming_nb/notebook/static/widget.js) is not built: run " +
      "scripts/build_labextension.sh (it needs Node), or install a built package";
  }
};
"""


def front_end(static: Path, name: str, unbuilt: str) -> Path | str:
    """The built front-end file ``static/name`` (a git-ignored build output of
    ``labextension/build-widget.mjs``), or ``unbuilt`` when it was never built."""
    path = static / name
    return path if path.is_file() else unbuilt


#: Statuses whose arrival rewrites a table's saved output at once (and leaving PAUSED:
#: a resume): a task finished, was stopped or paused. Other changes (queued -> running)
#: wait for the full-state refresh.
SETTLED_STATUSES: frozenset[str] = frozenset({*S.TERMINAL_STATUSES, "paused"})


class Clockish(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class _SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


@runtime_checkable
class ControllerLike(Protocol):
    """The part of ``cn.Controller`` the widget uses."""

    def get(self, task_id: str) -> TaskSnapshot: ...

    def list_tasks(
        self,
        status: Any = None,
        tag: str | None = None,
        name_prefix: str | None = None,
        pipeline_run_id: str | None = None,
        limit: int | None = None,
        ids: Any = None,
    ) -> list[TaskSnapshot]: ...

    def can_all(self, task_id: str) -> dict[str, tuple[bool, str | None]]: ...

    def apply(
        self, task_id: str, verb: str, *, actor: str = ..., args: Any = ...
    ) -> tuple[bool, str | None]: ...

    def watch(self, callback: Callable[[Any], None], filter: Any = None) -> Callable[[], None]: ...

    def logs(self, task_id: str, limit: int | None = None) -> list[Any]: ...


# --------------------------------------------------------------------------- scheduling


class _FlushScheduler:
    """One daemon thread that runs due flushes for every live TaskTable."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, TaskTable]] = []
        self._due: dict[int, float] = {}
        self._count = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, table: TaskTable, due: float) -> None:
        with self._cond:
            key = id(table)
            cur = self._due.get(key)
            if cur is not None and cur <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, next(self._count), table))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="chongming-widget-flush", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                due, _, table = self._heap[0]
                now = time.monotonic()
                if due > now:
                    self._cond.wait(due - now)
                    continue
                heapq.heappop(self._heap)
                if self._due.get(id(table)) != due:
                    continue  # superseded by an earlier schedule
                del self._due[id(table)]
            try:
                table._scheduled_flush()
            except Exception:  # never let one widget kill the thread
                log.exception("widget flush failed")


_SCHEDULER = _FlushScheduler()


class _Pinger:
    """Tells every open view that has heard nothing for PING_SECONDS that its kernel is
    alive. A view that stops hearing from its kernel (it died or was shut down) shows
    "disconnected — state as of HH:MM:SS" and disables its buttons."""

    def __init__(self) -> None:
        self._tables: weakref.WeakSet[TaskTable] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, table: TaskTable) -> None:
        with self._lock:
            self._tables.add(table)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="chongming-widget-ping", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(S.PING_SECONDS)
            self.ping_quiet(time.monotonic())

    def ping_quiet(self, now: float) -> int:
        """Ping every open table that has sent nothing for PING_SECONDS before ``now``
        (``time.monotonic()``); any message tells its views the kernel is alive.
        Returns the number of pings sent."""
        with self._lock:
            tables = list(self._tables)
        sent = 0
        for t in tables:
            if t.closed or now - t._last_sent < S.PING_SECONDS:
                continue
            try:
                t._send_custom({"type": "ping", "at": epoch_ms(t._clock.now())})
                sent += 1
            except Exception:
                log.debug("ping failed", exc_info=True)
        return sent


_PINGER = _Pinger()


# --------------------------------------------------------------------------- the widget


def _matches(snap: TaskSnapshot, query: Mapping[str, Any], *, status: bool = True) -> bool:
    """Does a task created after the table opened belong to it? (``status=False``: but
    for its status, which changes.)"""
    ids = query.get("ids")
    if ids is not None and snap.task_id not in ids:
        return False
    run = query.get("pipeline_run_id")
    if run is not None and snap.pipeline_run_id != run:
        return False
    if status and not status_matches(snap.status.value, query):
        return False
    tag = query.get("tag")
    if tag is not None and tag not in snap.tags:
        return False
    prefix = query.get("name_prefix")
    return prefix is None or snap.name.startswith(prefix)


def _max_parallel(ctl: Any) -> int | None:
    """The controller's ``concurrency.max_parallel``, when it has one."""
    limit = getattr(getattr(ctl, "concurrency", None), "max_parallel", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def _table_query(
    filter: Mapping[str, Any] | None, task_ids: Iterable[str] | None, run_id: str | None
) -> dict[str, Any]:
    """The ``list_tasks`` criteria of a table (``filter`` checked: a ValueError names
    an unknown key)."""
    query: dict[str, Any] = dict(filter or {})
    unknown = set(query) - {"status", "tag", "name_prefix"}
    if unknown:
        raise ValueError(
            f"unknown filter keys: {', '.join(sorted(unknown))} (known: status, tag, name_prefix)"
        )
    if task_ids is not None:
        query["ids"] = list(dict.fromkeys(task_ids))
    if run_id is not None:
        query["pipeline_run_id"] = run_id
    return query


def _list_query(query: Mapping[str, Any], limit: int | None) -> dict[str, Any]:
    q = dict(query)
    if limit is not None:
        q["limit"] = limit
    return q


class TaskTable(TableRequests, TableOutputs, anywidget.AnyWidget):
    """A live table of tasks: a single task (``kind="task"``), a pipeline run (``"run"``)
    or a board (``"board"``). One model, whatever the number of rows."""

    _esm = front_end(_STATIC, "widget.js", UNBUILT_ESM)
    _css = front_end(_STATIC, "widget.css", "")

    schema = traitlets.Dict().tag(sync=True)
    kind = traitlets.Unicode("board").tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    rows: traitlets.List[Any] = traitlets.List().tag(sync=True)
    rows_seq = traitlets.Int(0).tag(sync=True)
    rows_at = traitlets.Float(0.0).tag(sync=True)  # epoch ms of the state in ``rows``
    #: the controller's concurrency limit (tasks running at once), shown in the summary
    max_parallel = traitlets.Int(None, allow_none=True).tag(sync=True)
    #: the finished tasks of the table not shown (older than the newest it keeps), per
    #: status, and where they are (see older.py); patches and "full" carry it too
    hidden = traitlets.Dict().tag(sync=True)
    hidden_where = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        ctl: ControllerLike,
        *,
        kind: str = "board",
        task_ids: Iterable[str] | None = None,
        pipeline_run_id: str | None = None,
        filter: Mapping[str, Any] | None = None,
        title: str | None = None,
        limit: int | None = None,
        clock: Clockish | None = None,
        max_rate: float = 10.0,
        full_state_interval: float = 2.0,
        autoflush: bool = True,
    ) -> None:
        if kind not in S.KINDS:
            raise ValueError(f"kind must be one of {', '.join(S.KINDS)}, got {kind!r}")
        if not max_rate > 0:
            raise ValueError(f"max_rate must be > 0, got {max_rate!r}")
        query = _table_query(filter, task_ids, pipeline_run_id)
        self._ctl = ctl
        self._query = query
        self._ids_fixed = frozenset(query["ids"]) if "ids" in query else None
        self._clock: Clockish = clock or _SystemClock()
        self._min_interval = 1.0 / max_rate
        self._full_min_interval = full_state_interval
        self._autoflush = autoflush
        self._lock = threading.RLock()  # rows, dirty set, seq
        self._send_lock = threading.RLock()  # every call into ipywidgets/comm
        self._flush_lock = threading.Lock()  # one flush at a time
        # A progress update changes a row in place (under self._lock): a new dict per
        # update would be garbage-collector work on a busy board. So rows never leave
        # the widget uncopied.
        self._rows: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, tuple[Any, ...]] = {}  # status_key of each row's snapshot
        self._summary: dict[str, int] | None = None  # None: recount
        self._dirty: set[str] = set()
        self._flush_asked = False  # a flush is scheduled and has not started yet
        self._last_line: dict[str, str] = {}
        self._rates = RateTracker()
        self._can_cache: dict[
            str, tuple[tuple[Any, ...], Mapping[str, tuple[bool, str | None]]]
        ] = {}
        self._seq = 0
        self._full_seq = 0
        self._bundled_seq = 0  # the seq of the rows the last snapshot_data read
        self._changed_seq = 0  # the seq of the last patch that changed a status
        self._next_allowed = float("-inf")
        self._next_full = float("-inf")
        self._closed = False
        self._unsubscribe: Callable[[], None] | None = None
        self.messages_sent = 0
        self._last_sent = float("-inf")  # time.monotonic() of the last custom message
        # notebook outputs showing this table (display ids): their saved snapshot is
        # rewritten at once when a row finishes, pauses or resumes (before the patch that
        # shows it; see outputs.SNAPSHOT_CPU_SHARE), and on other status changes at the rate of
        # the full-state trait
        self._display_ids: list[str] = []
        self._publish: Publisher = publish_update
        self._snapshot_stale = False
        # a row reached a settled status: rewrite the saved output at _next_snapshot
        self._snapshot_urgent = False
        self._next_snapshot = float("-inf")
        self._cpu_time: Callable[[], float] = time.thread_time
        self.title_text = title or ""

        # finished rows past the newest kept leave the table, counted (see older.py)
        self._older = Older(None)
        # tasks created after the table opened that have not joined it yet: one that left
        # memory before its first flush is counted (the open-time counts do not hold it)
        self._joining: set[str] = set()
        self._opened_at = ctl_now(ctl)
        # subscribe first so nothing between the initial load and the watch is lost
        self._unsubscribe = ctl.watch(self._on_event)
        # an open-ended table shows the live tasks and the newest finished ones, as many
        # as the controller keeps in memory, and counts the older ones (see older.py)
        keep = kept_finished(ctl) if self._ids_fixed is None and limit is None else None
        hidden: dict[str, int] = {}
        if keep is None:
            snaps = ctl.list_tasks(**_list_query(query, limit))
        else:
            snaps, hidden = initial_snapshots(ctl, query, keep)
        if self._ids_fixed is not None:  # keep the caller's order
            order = {tid: i for i, tid in enumerate(query["ids"])}
            snaps.sort(key=lambda s: order.get(s.task_id, len(order)))
        for snap in snaps:
            self._rows[snap.task_id] = self._row_for(snap)
        self._older = Older(keep, hidden)
        self._older.start(self._rows.values())
        for tid in self._older.overflow(self._rows):
            del self._rows[tid]
        initial = [dict(r) for r in self._rows.values()]
        # the initial rows go out with the model: the next full-state refresh is one
        # full interval away
        self._next_full = self._clock.monotonic() + self._full_interval(len(initial))
        super().__init__(
            schema={**S.schema_for_js(), "hash": S.schema_hash()},
            max_parallel=_max_parallel(ctl),
            kind=kind,
            title=title or "",
            rows=initial,
            rows_seq=0,
            rows_at=epoch_ms(self._clock.now()) or 0.0,
            hidden=dict(self._older.hidden),
            hidden_where=where_hint(ctl),
        )
        self.on_msg(self._on_custom_msg)
        # clicks are handled on the subshell the front end sends them on, also while a
        # cell runs (see _subshell: ipykernel would queue them behind the cell)
        route_to_sender(self.comm)
        _PINGER.add(self)

    # ------------------------------------------------------------------ queries

    def _row_for(self, snap: TaskSnapshot, last_line: str | None = None) -> dict[str, Any]:
        """Build a row. Calls the controller: never call it holding ``self._lock`` (the
        controller may call ``_on_event`` holding its own lock)."""
        self._keys[snap.task_id] = status_key(snap)
        return build_row(
            snap,
            self._can_for(snap),
            rate=self._rate_for(snap),
            last_line=last_line,
            pauses=controller_pauses(self._ctl, snap),
        )

    def _rate_for(self, snap: TaskSnapshot) -> float | None:
        """Feed the task's progress to the rate tracker; its rate (None when terminal).

        A paused task's clock is stopped: its progress, saved with the pause and stamped
        later, is not a sample (it would slow the rate and the ETA of a row that must
        stand still), and after the resume the rate is measured from the resume on."""
        prog = snap.progress
        if snap.status is TaskStatus.PAUSED:
            rate = self._rates.pause(snap.task_id)
        elif prog is not None and (prog.done or prog.total):
            at = prog.updated_at or self._clock.now()
            rate = self._rates.observe(snap.task_id, at.timestamp(), float(prog.done))
        else:
            rate = self._rates.rate(snap.task_id)
        return None if snap.is_terminal else rate

    def _progress_delta(
        self, snap: TaskSnapshot, prev: Mapping[str, Any], last_line: str | None
    ) -> dict[str, Any]:
        """The progress fields of ``snap``'s row that differ from ``prev`` (a row of the
        same task whose snapshot had the same :func:`status_key`)."""
        fields = progress_fields(snap, self._rate_for(snap), last_line)
        return {k: v for k, v in fields.items() if prev[k] != v}

    def _can_for(self, snap: TaskSnapshot) -> Mapping[str, tuple[bool, str | None]]:
        """``ctl.can_all`` for a row, asked again only when something ``can`` depends on
        has changed (every transition bumps ``status_version``; progress does not)."""
        key = status_key(snap)
        hit = self._can_cache.get(snap.task_id)
        if hit is not None and hit[0] == key:
            return hit[1]
        can = self._ctl.can_all(snap.task_id)
        self._can_cache[snap.task_id] = (key, can)
        return can

    @property
    def task_ids(self) -> list[str]:
        with self._lock:
            return list(self._rows)

    def current_rows(self) -> list[dict[str, Any]]:
        """The latest rows (a copy), whatever has been sent."""
        with self._lock:
            return [dict(r) for r in self._rows.values()]

    @property
    def seq(self) -> int:
        return self._seq

    # ------------------------------------------------------------------ events in

    def _on_event(self, event: Any) -> None:
        """``ctl.watch`` callback: any thread. Marks a row dirty, nothing more."""
        try:
            task_id = getattr(event, "task_id", None)
            if not isinstance(task_id, str) or self._closed:
                return
            etype = type(event).__name__
            if etype == "TaskHeartbeat":
                return
            with self._lock:
                if task_id not in self._rows:
                    if self._ids_fixed is not None and task_id not in self._ids_fixed:
                        return
                    # on an open-ended table rows join on creation; other events of
                    # tasks not shown are noise
                    if etype != "TaskCreated" and self._ids_fixed is None:
                        return
                    if self._ids_fixed is None and not self._joins(event):
                        return
                if etype == "TaskLogLine":
                    line = getattr(event, "line", None)
                    if isinstance(line, str) and line.strip():
                        self._last_line[task_id] = clip(line.rstrip("\n")) or ""
                self._dirty.add(task_id)
            if not self._flush_asked:
                self._request_flush()
        except Exception:
            log.exception("TaskTable could not take an event")

    def _joins(self, event: Any) -> bool:
        """Under the lock: may the task a TaskCreated names join this open-ended table?
        (Remembered in ``_joining`` when the table counts its finished tasks.)"""
        snap = getattr(event, "snapshot", None)
        if not isinstance(snap, TaskSnapshot):
            return True
        if not _matches(snap, self._query, status=False):
            return False
        if self._older.keep is not None and (snap.created_at or self._opened_at) >= self._opened_at:
            self._joining.add(snap.task_id)
        return True

    def _request_flush(self) -> None:
        """Ask the flush thread for a flush (at the rate limit). Called after marking a
        row dirty: the flush about to start, if any, takes that row."""
        if not self._autoflush or self._closed:
            return
        self._flush_asked = True  # before scheduling: the flush may start at once
        delay = max(0.0, self._next_allowed - self._clock.monotonic())
        try:
            _SCHEDULER.schedule(self, time.monotonic() + delay)
        except BaseException:
            self._flush_asked = False  # the next event asks again
            raise

    def _scheduled_flush(self) -> None:
        # Cleared before the flush takes the dirty set: a row marked dirty after this
        # line either is taken by this flush or asks for the next one.
        self._flush_asked = False
        if self._closed:
            return
        self.flush()
        with self._lock:
            dirty = bool(self._dirty)
        dues = []
        if dirty:
            dues.append(self._next_allowed)
        if self._full_seq != self._seq:
            dues.append(self._next_full)
        if self._snapshot_urgent and self._display_ids:
            dues.append(self._next_snapshot)
        if dues and not self._closed:
            now = self._clock.monotonic()
            if dirty:
                self._flush_asked = True
            _SCHEDULER.schedule(self, time.monotonic() + max(0.0, min(dues) - now))

    # ------------------------------------------------------------------ flushing

    def flush(self, *, force: bool = False) -> bool:
        """Send one patch with the rows that changed, if the rate limit allows (or
        ``force``). Returns True if a patch was sent. Safe from any thread."""
        with self._flush_lock:
            now = self._clock.monotonic()
            sent = False
            with self._lock:
                ready = bool(self._dirty) and (force or now >= self._next_allowed)
                dirty = self._dirty if ready else set()
                if ready:
                    self._dirty = set()
            if dirty:
                sent = self._send_patch(dirty)
            if self._full_seq != self._seq and (force or now >= self._next_full):
                self._refresh_full_trait(now)
            if self._snapshot_urgent and now >= self._next_snapshot:
                self._update_displays()
            return sent

    def _fetch(self, ids: list[str]) -> dict[str, TaskSnapshot]:
        try:
            snaps = self._ctl.list_tasks(ids=ids)
            return {s.task_id: s for s in snaps}
        except TypeError:  # a controller without ids= support
            found: dict[str, TaskSnapshot] = {}
            for tid in ids:
                with contextlib.suppress(TaskNotFound):
                    found[tid] = self._ctl.get(tid)
            return found

    def _send_patch(self, dirty: set[str]) -> bool:
        # Only flushes (one at a time, under _flush_lock) change _rows and _keys, so
        # reading them here without self._lock is safe; writes take it for the readers.
        order = sorted(dirty)
        snaps = self._fetch(order)
        with self._lock:
            lines = self._last_line
            last_lines = {tid: lines[tid] for tid in order if tid in lines} if lines else {}
        rows = self._rows
        keys = self._keys
        changed: dict[str, dict[str, Any]] = {}  # new rows
        patched: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (row, its delta)
        upsert: list[dict[str, Any]] = []
        update: list[dict[str, Any]] = []
        remove: list[str] = []
        recount = False
        settled = False  # a row finished, paused or resumed: the saved output follows
        joining = self._joining
        vanished: list[str] = []  # joining, but gone from memory before it was shown
        for tid in order:
            snap = snaps.get(tid)
            prev = rows.get(tid)
            if snap is None:
                if prev is not None:
                    remove.append(tid)
                elif tid in joining:
                    vanished.append(tid)
                continue
            if prev is None:
                if not _matches(snap, self._query):
                    continue
                row = self._row_for(snap, last_lines.get(tid))
                changed[tid] = row
                upsert.append(dict(row))
                settled = settled or row["status"] in SETTLED_STATUSES
                continue
            if keys.get(tid) == status_key(snap):
                delta = self._progress_delta(snap, prev, last_lines.get(tid))
                if not delta:
                    continue
                patched.append((prev, delta))
            else:
                row = self._row_for(snap, last_lines.get(tid))
                delta = {k: v for k, v in row.items() if prev.get(k) != v}
                if not delta:
                    continue
                changed[tid] = row
                if "status" in delta:
                    recount = True
                    settled = settled or (
                        row["status"] in SETTLED_STATUSES or prev["status"] == "paused"
                    )
            delta["id"] = tid
            update.append(delta)
        left = [
            (tid, st)
            for tid in vanished
            if (st := departed_status(self._ctl, tid)) and status_matches(st, self._query)
        ]
        if joining:
            with self._lock:
                joining.difference_update(order)
        if not changed and not patched and not remove and not left:
            return False
        older = self._older
        hidden_changed = False
        with self._lock:
            for tid, st in left:
                hidden_changed = older.gone(tid, st) or hidden_changed
            rows.update(changed)
            for row, delta in patched:
                row.update(delta)
            for tid, row in changed.items():
                older.seen(tid, row["status"])
            for tid in remove:  # (a finished task that left memory without a store)
                hidden_changed = older.gone(tid, str(rows[tid]["status"])) or hidden_changed
            dropped = older.overflow(rows)  # finished rows past the newest kept
            if dropped:
                remove.extend(dropped)
                hidden_changed = True
            for tid in remove:
                del rows[tid]
                keys.pop(tid, None)
                self._rates.forget(tid)
                self._can_cache.pop(tid, None)
            recount = recount or hidden_changed
            if recount or upsert or remove:
                self._snapshot_stale = True
                self._changed_seq = self._seq + 1  # (this patch's seq)
            if settled and self._display_ids:
                self._snapshot_urgent = True
            if recount or upsert or remove or self._summary is None:
                self._summary = add_counts(summarize(rows.values()), older.hidden)
            summary = dict(self._summary)
            hidden = dict(older.hidden) if hidden_changed else None
            base = self._seq
            self._seq += 1
            seq = self._seq
        msg = {
            "type": "patch",
            "seq": seq,
            "base": base,
            "upsert": upsert,
            "update": update,
            "remove": remove,
            "summary": summary,
            "at": epoch_ms(self._clock.now()),
        }
        if hidden is not None:
            msg["hidden"] = hidden
        if self._snapshot_urgent and self._clock.monotonic() >= self._next_snapshot:
            # before the patch, on the same channel: a view that shows the row finished
            # has its saved output rewritten already (a save right after the stop holds it)
            self._update_displays()
        self._send_custom(msg)
        # the quiet interval counts from the end of the send: with the flush's own time
        # added, the rate stays below max_rate (pings, acks and the full-state trait share
        # the channel)
        self._next_allowed = self._clock.monotonic() + self._min_interval
        return True

    def _full_interval(self, n_rows: int) -> float:
        # The full trait serves only saved widget state and views opened later (a reload
        # asks get_state): a 10,000-row board re-sends it every 100 s; live views patch.
        return max(self._full_min_interval, n_rows / 100.0)

    def _refresh_full_trait(self, now: float) -> None:
        with self._lock:
            rows = [dict(r) for r in self._rows.values()]
            seq = self._seq
            hidden = dict(self._older.hidden)
        with self._send_lock:
            if self._closed:
                return
            with self.hold_sync():
                self.rows = rows
                if hidden != self.hidden:
                    self.hidden = hidden
                self.rows_seq = seq
                self.rows_at = epoch_ms(self._clock.now()) or 0.0
        self._full_seq = seq
        self._next_full = now + self._full_interval(len(rows))
        if self._snapshot_stale and self._display_ids:
            self._update_displays()

    def get_state(self, key: Any = None) -> dict[str, Any]:
        """Answer state requests (a page reload) with the current rows, not the last
        low-rate trait value."""
        state: dict[str, Any] = super().get_state(key)
        if "rows" in state and getattr(self, "_rows", None) is not None:
            with self._lock:
                state["rows"] = [dict(r) for r in self._rows.values()]
                if "rows_seq" in state or key is None:
                    state["rows_seq"] = self._seq
                if "hidden" in state:
                    state["hidden"] = dict(self._older.hidden)
        return state

    def _send_custom(self, msg: dict[str, Any]) -> None:
        with self._send_lock:
            if self._closed:
                return
            self.messages_sent += 1
            self._last_sent = time.monotonic()
            self.send(msg)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Unsubscribe from the controller and close the comm."""
        unsubscribe = getattr(self, "_unsubscribe", None)
        if unsubscribe is not None:
            self._unsubscribe = None
            try:
                unsubscribe()
            except Exception:
                log.exception("unsubscribing the widget failed")
        lock = getattr(self, "_send_lock", None)
        if lock is None:
            super().close()
            return
        with lock:
            self._closed = True
            super().close()

    @property
    def closed(self) -> bool:
        return self._closed
