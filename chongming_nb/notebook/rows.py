"""Turning task snapshots into the plain-JSON rows the widget and the html snapshot show.

Pure functions plus a small progress-rate tracker; no widget, no threads of its own.
"""

from __future__ import annotations

import html
import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chongming_nb.core.models import (
    ACTOR_SOURCE_LABELS,
    TaskSnapshot,
    Transition,
    end_summary,
    start_text,
    start_time,
)
from chongming_nb.core.states import TaskStatus
from chongming_nb.notebook.older import add_counts, hidden_text
from chongming_nb.notebook.schema import STATUSES, VERBS

#: Longest last-message / log line kept in a row (the full line stays in the log).
MAX_MESSAGE_LEN = 300
_RATE_WINDOW = 8


def epoch_ms(at: datetime | None) -> float | None:
    if at is None:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return round(at.timestamp() * 1000.0, 3)


def clip(text: str | None, limit: int = MAX_MESSAGE_LEN) -> str | None:
    if text is None:
        return None
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RateTracker:
    """Progress rate (units/s) per task from the last few (time, done) samples.

    A task's samples are one deque of floats, time and done alternating: no tuple per
    sample (floats are not tracked by the garbage collector; a tuple kept per progress
    update would be, and a busy board would pay for it in collections)."""

    def __init__(self, window: int = _RATE_WINDOW) -> None:
        self._window = window
        self._samples: dict[str, deque[float]] = {}
        #: paused tasks: (the rate before the pause, whether the new window has begun)
        self._held: dict[str, tuple[float | None, bool]] = {}

    def observe(self, task_id: str, at_s: float, done: float) -> float | None:
        """Add a sample (ignored unless newer than the last; progress that went back, a
        retry, starts over) and return the rate, as :meth:`rate` would."""
        q = self._samples.get(task_id)
        if q is None:
            q = self._samples[task_id] = deque(maxlen=2 * self._window)
        held = self._held.get(task_id) if self._held else None
        if held is not None and not held[1]:
            # the first sample after a pause begins a new window: none measures the pause
            q.clear()
            q.append(at_s)
            q.append(done)
            self._held[task_id] = (held[0], True)
            return held[0]
        if not q:
            q.append(at_s)
            q.append(done)
            return None
        t1, d1 = q[-2], q[-1]
        if done < d1:
            self._held.pop(task_id, None)
            q.clear()
            q.append(at_s)
            q.append(done)
            return None
        if at_s > t1:
            q.append(at_s)
            q.append(done)
            t1, d1 = at_s, done
        t0 = q[0]
        if held is not None:
            if t1 <= t0:
                return held[0]  # the new window has one sample: the rate before the pause
            del self._held[task_id]
        return (d1 - q[1]) / (t1 - t0) if t1 > t0 else None

    def pause(self, task_id: str) -> float | None:
        """The task is paused: its next sample begins a new window (a window across the
        pause would read as a slow rate after the resume); until that window has two
        samples the rate is the one before the pause. Returns that rate."""
        rate = self.rate(task_id)
        if task_id in self._samples:
            self._held[task_id] = (rate, False)
        return rate

    def rate(self, task_id: str) -> float | None:
        held = self._held.get(task_id) if self._held else None
        if held is not None:
            return held[0]
        q = self._samples.get(task_id)
        if not q or len(q) < 4:
            return None
        t0, d0, t1, d1 = q[0], q[1], q[-2], q[-1]
        if t1 <= t0:
            return None
        return (d1 - d0) / (t1 - t0)

    def forget(self, task_id: str) -> None:
        self._samples.pop(task_id, None)
        self._held.pop(task_id, None)


#: Row fields that follow a task's progress (and its last log line); the rest of a row
#: changes only with the fields :func:`status_key` collects.
PROGRESS_FIELDS: tuple[str, ...] = ("done", "total", "unit", "message", "rate", "eta")


def status_key(snap: TaskSnapshot) -> tuple[Any, ...]:
    """Everything a row reads from a snapshot apart from its progress (``can`` included:
    ``ctl.can`` depends on these). Equal keys mean only :data:`PROGRESS_FIELDS` can
    differ between the two rows."""
    return (
        snap.status_version,
        snap.status,
        snap.requested_action,
        snap.attempt,
        snap.max_attempts,
        snap.started_at,
        snap.ended_at,
        snap.failure,
        snap.outcome,
        snap.name,
        snap.tags,
        snap.pipeline_run_id,
        snap.created_at,
    )


def _round(x: float, scale: float) -> float:
    """``x`` to the nearest multiple of ``1 / scale`` (an integer over ``scale``, so the
    float prints short); several times cheaper than ``round(x, digits)``, which this
    runs for every changed row."""
    return math.floor(x * scale + 0.5) / scale


def progress_fields(
    snap: TaskSnapshot, rate: float | None, last_line: str | None
) -> dict[str, Any]:
    """The :data:`PROGRESS_FIELDS` of a row."""
    prog = snap.progress
    if prog is None:
        done, total, unit, message = 0.0, None, None, last_line
    else:
        done = float(prog.done)
        total = None if prog.total is None else float(prog.total)
        unit = prog.unit
        message = prog.message or last_line
    eta: float | None = None
    if rate is not None:
        if rate > 0 and total is not None and not snap.is_terminal:
            eta = _round(max(0.0, total - done) / rate, 10.0)
        rate = _round(rate, 1000.0)
    if message is not None and (message.__class__ is not str or len(message) > MAX_MESSAGE_LEN):
        message = clip(message)
    return {
        "done": done,
        "total": total,
        "unit": unit,
        "message": message,
        "rate": rate,
        "eta": eta,
    }


def average_rate(snap: TaskSnapshot) -> float | None:
    """Units per second over the current attempt, from its start to the last progress
    report (what a reader with one snapshot and no history can say; the widget's
    :class:`RateTracker` follows the recent rate instead)."""
    prog = snap.progress
    if prog is None or prog.updated_at is None or snap.started_at is None or not prog.done:
        return None
    secs = (prog.updated_at - snap.started_at).total_seconds()
    return float(prog.done) / secs if secs > 0 else None


@dataclass(frozen=True, slots=True)
class PauseClock:
    """The pauses in place of a task's current attempt: ``paused``, the seconds it spent
    PAUSED in the pauses that ended; ``since``, when the pause it is in now began (None
    when it is not paused). See :func:`pause_clock`."""

    paused: float = 0.0
    since: datetime | None = None


#: A task never paused in its current attempt (or not started).
NO_PAUSE = PauseClock()


def pause_clock(snap: TaskSnapshot, transitions: Iterable[Transition]) -> PauseClock:
    """The pauses of ``snap``'s current attempt, from the task's ``transitions`` (ascending
    by version; all of them, or only those into and out of PAUSED). A pause is the span
    from a transition into PAUSED to the next one out of it, counted when it began at or
    after the attempt's start (``started_at``); a transition newer than ``snap`` is left
    out, so a snapshot and a history read a moment apart still agree. PAUSING is work:
    the task runs to its next checkpoint (or the pause is withdrawn and it never stopped).

    The one definition of a row's elapsed time (``frozen``, ``paused``): the kernel's
    board reads the transitions from the controller, the sidebar's listing from the
    store (one read per page)."""
    started = snap.started_at
    if started is None:
        return NO_PAUSE
    paused = 0.0
    entered: datetime | None = None
    for tr in transitions:
        if tr.version > snap.status_version or tr.at < started:
            continue
        if tr.to_status is TaskStatus.PAUSED:
            entered = tr.at
        elif tr.from_status is TaskStatus.PAUSED and entered is not None:
            paused += max(0.0, (tr.at - entered).total_seconds())
            entered = None
    since = entered if snap.status is TaskStatus.PAUSED else None
    if not paused and since is None:
        return NO_PAUSE
    return PauseClock(paused, since)


def controller_pauses(ctl: Any, snap: TaskSnapshot) -> PauseClock:
    """The pauses of a started task's current attempt, from the controller's history of
    it (the store's for a task no longer in memory); a board asks it when a row's status
    changes, not per progress update."""
    if snap.started_at is None:
        return NO_PAUSE
    history = getattr(ctl, "history", None)
    if not callable(history):
        return NO_PAUSE
    try:
        transitions = history(snap.task_id)
    except Exception:  # (a task that left memory without a store, a controller without it)
        return NO_PAUSE
    return pause_clock(snap, transitions)


def elapsed_seconds(row: Mapping[str, Any], now_ms: float) -> float | None:
    """Seconds of work of a row's current attempt at ``now_ms`` (None before it started):
    its wall time, to ``ended``, else to ``frozen`` (paused), else to now, minus the time
    it spent ``paused``. The same as ``elapsedSeconds`` of ``labextension/src/row.ts``."""
    started = row.get("started")
    if started is None:
        return None
    end = row.get("ended")
    if end is None:
        end = row.get("frozen")
    if end is None:
        end = now_ms
    paused = float(row.get("paused") or 0.0)
    return max(0.0, (float(end) - float(started) - paused) / 1000.0)


def build_row(
    snap: TaskSnapshot,
    can: Mapping[str, tuple[bool, str | None]],
    *,
    rate: float | None = None,
    last_line: str | None = None,
    pauses: PauseClock = NO_PAUSE,
) -> dict[str, Any]:
    """One row (keys: :data:`chongming_nb.notebook.schema.ROW_FIELDS`). ``pauses``: the
    pauses of its current attempt (:func:`pause_clock`), for ``frozen`` and ``paused``."""
    failure = None
    if snap.failure is not None:
        failure = {
            "kind": str(snap.failure.kind),
            "message": clip(snap.failure.message),
            "exception_type": snap.failure.exception_type,
        }
    by, note = end_fields(snap)
    return {
        "id": snap.task_id,
        "name": snap.name,
        "status": str(snap.status.value),
        "version": snap.status_version,
        "attempt": snap.attempt,
        "max_attempts": snap.max_attempts,
        **progress_fields(snap, rate, last_line),
        "created": epoch_ms(snap.created_at),
        "started": epoch_ms(snap.started_at),
        "ended": epoch_ms(snap.ended_at),
        "failure": failure,
        "ended_by": by,
        "end_reason": note,
        "has_tb": bool(snap.failure is not None and snap.failure.traceback),
        "tags": sorted(snap.tags),
        "run": snap.pipeline_run_id,
        "starts": epoch_ms(start_time(snap)),
        "requested": None if snap.requested_action is None else str(snap.requested_action.value),
        "can": {verb: bool(can.get(verb, (False, None))[0]) for verb in VERBS},
        "frozen": epoch_ms(pauses.since),
        "paused": round(pauses.paused * 1000.0, 3),
    }


def starts_text(row: Mapping[str, Any], now_ms: float) -> str | None:
    """ "starts at 14:05 (in 3m)" for a task waiting for a delayed start."""
    starts = row.get("starts")
    if starts is None:
        return None
    at = datetime.fromtimestamp(float(starts) / 1000.0, tz=UTC)
    return start_text(at, datetime.fromtimestamp(now_ms / 1000.0, tz=UTC))


def end_fields(snap: TaskSnapshot) -> tuple[str | None, str | None]:
    """``(ended_by, end_reason)`` of a row (see ``core.models.end_summary``)."""
    by, note = end_summary(snap)
    return by, clip(note)


def end_text(row: Mapping[str, Any]) -> str | None:
    """ "stopped from the sidebar at 14:03:07: not needed" for a row a verb ended."""
    by = row.get("ended_by")
    if not by:
        return None
    text = f"{row['status']} {ACTOR_SOURCE_LABELS.get(str(by), str(by))}"
    ended = row.get("ended")
    if ended is not None:
        text += f" at {_fmt_time(ended)}"
    note = row.get("end_reason")
    return f"{text}: {note}" if note else text


def summarize(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Counts per status, in lifecycle order, zero counts left out."""
    counts = Counter(str(r["status"]) for r in rows)
    return {s: counts[s] for s in STATUSES if counts.get(s)}


def _counts(rows: Iterable[Mapping[str, Any]], hidden: Mapping[str, int] | None) -> dict[str, int]:
    return add_counts(summarize(rows), hidden) if hidden else summarize(rows)


def _fmt_time(ms: float | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000.0, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt_duration(row: Mapping[str, Any], now_ms: float) -> str:
    secs = elapsed_seconds(row, now_ms)
    if secs is None:
        return ""
    m, s = divmod(int(secs), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _fmt_progress(row: Mapping[str, Any]) -> str:
    done, total, unit = row.get("done"), row.get("total"), row.get("unit")
    if total is None and not done:
        return ""
    text = f"{done:g}" if total is None else f"{done:g}/{total:g}"
    return f"{text} {unit}" if unit else text


def summary_text(summary: Mapping[str, int]) -> str:
    total = sum(summary.values())
    parts = ", ".join(f"{n} {s}" for s, n in summary.items())
    return f"{total} task{'s' if total != 1 else ''}" + (f": {parts}" if parts else "")


def _older(hidden: Mapping[str, int] | None, where: str) -> str | None:
    return hidden_text(hidden, where) if hidden else None


def render_plain(
    rows: Sequence[Mapping[str, Any]],
    *,
    title: str | None,
    at: datetime,
    limit: int = 20,
    hidden: Mapping[str, int] | None = None,
    where: str = "",
) -> str:
    """A text/plain snapshot (what a terminal, or a notebook without widgets, shows).
    ``hidden``: counts per status of the table's finished tasks not among ``rows``
    (counted in the summary, named on a line with ``where`` they are)."""
    now_ms = epoch_ms(at) or 0.0
    counts = _counts(rows, hidden)
    lines = [f"{title or 'tasks'} — {summary_text(counts)} (as of {at:%H:%M:%S})"]
    older = _older(hidden, where)
    if older:
        lines.append(f"  ({older})")
    for row in rows[:limit]:
        prog = _fmt_progress(row)
        dur = _fmt_duration(row, now_ms)
        failure = row.get("failure")
        why = f"{failure['kind']}: {failure['message']}" if failure else None
        msg = end_text(row) or starts_text(row, now_ms) or why or row.get("message") or ""
        bits = [str(row["name"]), f"[{row['status']}]", prog, dur, str(msg)]
        lines.append("  " + "  ".join(b for b in bits if b))
    if len(rows) > limit:
        lines.append(f"  … {len(rows) - limit} more")
    return "\n".join(lines)


def render_html(
    rows: Sequence[Mapping[str, Any]],
    *,
    title: str | None,
    at: datetime,
    tracebacks: Mapping[str, str] | None = None,
    limit: int = 200,
    hidden: Mapping[str, int] | None = None,
    where: str = "",
) -> str:
    """A static, escaped html table: shown by nbconvert, GitHub, or when the widget cannot
    render. Every user string goes through ``html.escape``; no scripts, no inline events.
    ``hidden`` and ``where``: as for :func:`render_plain`."""
    e = html.escape
    now_ms = epoch_ms(at) or 0.0
    tbs = tracebacks or {}
    older = _older(hidden, where)
    out = [
        '<div class="cn-snapshot">',
        f"<p><strong>{e(title or 'tasks')}</strong> — {e(summary_text(_counts(rows, hidden)))}"
        f" <em>(snapshot as of {e(at.strftime('%H:%M:%S'))})</em></p>",
        *([f'<p class="cn-older">{e(older)}</p>'] if older else []),
        "<table>",
        "<thead><tr><th>name</th><th>status</th><th>progress</th><th>attempt</th>"
        "<th>started</th><th>duration</th><th>message</th></tr></thead>",
        "<tbody>",
    ]
    for row in rows[:limit]:
        msg = starts_text(row, now_ms) or row.get("message") or ""
        failure = row.get("failure")
        end = end_text(row)
        if failure:
            msg = f"{failure['kind']}: {failure['message']}"
        if end:
            msg = end if not failure else f"{end} ({msg})"
        cell = e(str(msg))
        tb = tbs.get(str(row["id"]))
        if tb:
            cell += f"<details><summary>traceback</summary><pre>{e(tb)}</pre></details>"
        out.append(
            "<tr>"
            f'<td title="{e(str(row["id"]))}">{e(str(row["name"]))}</td>'
            f"<td>{e(str(row['status']))}</td>"
            f"<td>{e(_fmt_progress(row))}</td>"
            f"<td>{int(row['attempt'])}/{int(row['max_attempts'])}</td>"
            f"<td>{e(_fmt_time(row.get('started')))}</td>"
            f"<td>{e(_fmt_duration(row, now_ms))}</td>"
            f"<td>{cell}</td>"
            "</tr>"
        )
    out.append("</tbody></table>")
    if len(rows) > limit:
        out.append(f"<p>… {len(rows) - limit} more tasks not shown</p>")
    out.append("</div>")
    return "".join(out)
