"""The attempt timeline: one lane per task, attempts as bars, waits and stops marked, the
slots in use as a strip underneath.

Built from the two history frames every source already gives (``attempts_df()`` and
``events_df()`` of a controller, a store reader or a pipeline run), so it shows exactly
what the frames say — nothing is measured twice. Pure: no clock reads (the caller passes
``now`` for attempts still running), no I/O, no pandas objects kept.

Invariants:

* every attempt row is exactly one :class:`Bar`, on the lane of its task;
* a lane's marks come from its own task's transitions, in version order;
* the slot strip counts attempts whose interval covers the instant: it rises at a start
  and falls at an end (ties: the end first, so back-to-back attempts never count twice).
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.states import STATUS_TONES, TERMINAL

_TERMINAL = frozenset(s.value for s in TERMINAL)

#: The marks drawn on a lane, and which statuses open them (the interval lasts until the
#: task leaves those statuses).
INTERVAL_MARKS: Mapping[str, frozenset[str]] = {
    "retry_wait": frozenset({"retry_wait"}),
    "paused": frozenset({"pausing", "paused"}),
    "stopping": frozenset({"stopping"}),
}
#: Point marks: a person's (or the orchestration's) stop, and a timeout that ended an attempt.
POINT_MARKS: tuple[str, ...] = ("stop", "timeout")

#: Bar and mark colours by tone (the tone of a status comes from ``STATUS_TONES``), as CSS
#: custom properties of JupyterLab with a fallback for places without its theme.
TONE_COLOURS: Mapping[str, str] = {
    "idle": "var(--jp-layout-color3, #9aa4ad)",
    "active": "var(--jp-brand-color1, #1976d2)",
    "warn": "var(--jp-warn-color1, #b26a00)",
    "ok": "var(--jp-success-color1, #2e7d32)",
    "bad": "var(--jp-error-color1, #c62828)",
    "muted": "var(--jp-ui-font-color2, #6e7781)",
}
#: The same tones as plain colours (matplotlib knows no CSS variables).
TONE_HEX: Mapping[str, str] = {
    tone: value.rsplit(",", 1)[1].strip(" )") for tone, value in TONE_COLOURS.items()
}
MARK_TONES: Mapping[str, str] = {
    "retry_wait": "warn",
    "paused": "warn",
    "stopping": "muted",
    "stop": "muted",
    "timeout": "bad",
}


@dataclass(frozen=True, slots=True)
class Bar:
    """One attempt: seconds from the timeline's start; ``running`` ends at ``now``."""

    lane: int
    task_id: str
    attempt: int
    start: float
    end: float
    outcome: str | None  # None while it runs
    running: bool
    details: tuple[tuple[str, str], ...]  # the attempt's row of attempts_df, as text

    @property
    def tone(self) -> str:
        return "active" if self.outcome is None else STATUS_TONES.get(self.outcome, "idle")


@dataclass(frozen=True, slots=True)
class Mark:
    lane: int
    kind: str  # a key of INTERVAL_MARKS or one of POINT_MARKS
    start: float
    end: float  # == start for a point mark
    label: str


@dataclass(frozen=True, slots=True)
class Timeline:
    """What is drawn. ``lanes`` are ``(task_id, name)``; times are seconds from ``t0``."""

    t0: datetime | None
    span: float
    lanes: tuple[tuple[str, str], ...]
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]
    slots: tuple[tuple[float, int], ...]  # (time, attempts running from then on)
    title: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    #: something was still going on (an attempt running, a task waiting or paused)
    live: bool = False

    @property
    def max_slots(self) -> int:
        return max((n for _, n in self.slots), default=0)

    def to_svg(self, path: str | os.PathLike[str] | None = None) -> str:
        """The picture as an SVG document; written to ``path`` too when given."""
        svg = to_svg(self)
        if path is not None:
            Path(path).write_text(svg, encoding="utf-8")
        return svg

    def plot(self, ax: Any = None) -> Any:
        """The picture as a matplotlib Figure (matplotlib is an optional extra)."""
        return plot(self, ax)

    def summary(self) -> str:
        if not self.lanes:
            return f"{self.title or 'timeline'}: no attempts yet"
        return (
            f"{self.title or 'timeline'}: {len(self.lanes)} tasks, {len(self.bars)} attempts "
            f"over {human_seconds(self.span)}, at most {self.max_slots} running at once"
        )

    def to_json(self) -> dict[str, Any]:
        """The picture as the data of :data:`TIMELINE_MIME` (columns, JSON-ready)."""
        return to_json(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        # JupyterLab draws the data on a canvas (labextension/src/timeline.ts: fast for
        # 10,000 attempts, hover shows the attempt's row); elsewhere the inline SVG in HTML
        # (theme colours apply; hovering a bar shows its row up to SVG_TITLES_UP_TO bars),
        # in a saved notebook and the nbconvert export alike
        svg = to_svg(self)
        return {
            TIMELINE_MIME: to_json(self),
            "text/html": f'<div class="cn-timeline-output">{svg}</div>',
            "image/svg+xml": svg,
            "text/plain": self.summary(),
        }

    def _ipython_display_(self) -> None:
        """In a notebook: shown at once and, while its work goes on (a controller's or a
        run's timeline that is still ``live``), redrawn as it changes, so the saved
        notebook keeps the final picture."""
        refresh, show_live = self.meta.get("refresh"), self.meta.get("show_live")
        if show_live is not None and self.live and callable(refresh):
            show_live(self, refresh)
            return
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)

    def __repr__(self) -> str:
        return f"<Timeline {self.summary()}>"


#: ``show(first, refresh)`` displays a live timeline in a notebook (the control layer
#: passes the notebook layer's, ``control.display.live_timeline``, to ``from_source``).
LiveDisplay = Callable[[Timeline, Callable[[], Timeline]], Any]


class HistorySource(Protocol):
    """What a timeline is drawn from: a controller, a store reader (``cn.open_store``)."""

    def attempts_df(self, **filters: Any) -> Any: ...
    def events_df(self, **filters: Any) -> Any: ...


def from_source(
    source: HistorySource,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    title: str = "",
    now: datetime | None = None,
    refresh: Callable[[], Timeline] | None = None,
    show_live: LiveDisplay | None = None,
    **filters: Any,
) -> Timeline:
    """The timeline of the tasks ``filters`` select (the DataFrame filters: ``status``,
    ``tag``, ``name_prefix``, ``pipeline_run_id``, ``ids``, ``limit``), cut to the attempts
    that overlap ``[since, until]`` and the transitions inside it. ``refresh`` draws it
    again; with ``show_live`` a notebook shows it that way while its work goes on."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
            raise ConfigurationError(f"{name} must be a timezone-aware datetime, got {value!r}")
    if since is not None and until is not None and until < since:
        raise ConfigurationError(f"until ({until}) is before since ({since})")
    attempts = source.attempts_df(**filters)
    transitions = source.events_df(**filters)
    if since is not None or until is not None:
        ends = attempts["ended_at"]
        keep = attempts["started_at"].notna()
        if since is not None:
            keep &= ends.isna() | (ends >= since)
            transitions = transitions[transitions["at"] >= since]
        if until is not None:
            keep &= attempts["started_at"] <= until
            transitions = transitions[transitions["at"] <= until]
        attempts = attempts[keep]
    tl = build(attempts, transitions, now=now, title=title)
    if refresh is not None:  # a live source: how to draw it again, and what to watch
        live = {"refresh": refresh, "source": source, "show_live": show_live}
        tl = replace(tl, meta={**tl.meta, **live})
    return tl


def _text(value: Any) -> str:
    if value is None:
        return ""
    try:
        if value != value:  # NaN, NaT, pd.NA compare unequal (pd.NA raises: below)
            return ""
    except TypeError:
        return ""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if hasattr(value, "total_seconds"):
        return human_seconds(value.total_seconds())
    return str(value)


def human_seconds(seconds: float) -> str:
    """``0.25`` -> ``250ms``, ``75`` -> ``1m15s``, ``7260`` -> ``2h01m``."""
    if not math.isfinite(seconds):
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _records(frame: Any) -> list[dict[str, Any]]:
    """Rows of a DataFrame as dicts with missing values as None (no pandas types leak);
    rows given as mappings already (a reader without pandas) are taken as they are."""
    if frame is None or len(frame) == 0:
        return []
    if isinstance(frame, Sequence):
        return [dict(row) for row in frame]
    cleaned = frame.astype(object).where(frame.notna(), None)
    return list(cleaned.to_dict("records"))


def build(
    attempts: Any,
    transitions: Any,
    *,
    now: datetime | None = None,
    title: str = "",
) -> Timeline:
    """The timeline of ``attempts`` (an ``attempts_df()`` frame) and ``transitions`` (an
    ``events_df()`` frame of the same tasks), or of their rows as mappings with the
    frames' column names. ``now`` ends the bars of attempts that are
    still running (default: the latest time in the frames)."""
    rows = _records(attempts)
    steps = _records(transitions)
    times = [r["started_at"] for r in rows if r.get("started_at") is not None]
    times += [r["ended_at"] for r in rows if r.get("ended_at") is not None]
    times += [t["at"] for t in steps if t.get("at") is not None]
    if not times:
        return Timeline(None, 0.0, (), (), (), (), title)
    t0 = min(times)
    end_of_data = max(times)
    # ``now`` matters only while something is still going on (an attempt running, a task
    # waiting or paused): a finished history ends where its last record does
    last_status: dict[str, tuple[int, str]] = {}
    for t in steps:
        key, version = str(t["task_id"]), int(t["version"])
        if key not in last_status or version > last_status[key][0]:
            last_status[key] = (version, _text(t.get("to_status")))
    live = any(r.get("started_at") is not None and r.get("ended_at") is None for r in rows) or any(
        status not in _TERMINAL for _, status in last_status.values()
    )
    now = max(now, end_of_data) if (now is not None and live) else end_of_data

    def sec(t: datetime) -> float:
        return (t - t0).total_seconds()

    # lanes in order of each task's first appearance (first attempt, else first transition)
    first_seen: dict[str, tuple[datetime, str]] = {}
    for r in rows:
        tid = str(r["task_id"])
        at = r.get("started_at") or now
        if tid not in first_seen or at < first_seen[tid][0]:
            first_seen[tid] = (at, str(r.get("name") or tid))
    for t in steps:
        tid = str(t["task_id"])
        if tid not in first_seen and t.get("at") is not None:
            first_seen[tid] = (t["at"], str(t.get("name") or tid))
    order = sorted(first_seen, key=lambda tid: (first_seen[tid][0], tid))
    lane_of = {tid: i for i, tid in enumerate(order)}
    lanes = tuple((tid, first_seen[tid][1]) for tid in order)

    bars = []
    marks = []
    for r in rows:
        if r.get("started_at") is None:
            continue
        running = r.get("ended_at") is None
        ended = now if running else r["ended_at"]
        shown = ("name", "attempt", "outcome", "failure_kind", "failure_message", "executor")
        details = tuple((k, _text(r.get(k))) for k in shown if _text(r.get(k)))
        details += (("started", _text(r["started_at"])),)
        if not running:
            details += (("duration", human_seconds((ended - r["started_at"]).total_seconds())),)
        bars.append(
            Bar(
                lane=lane_of[str(r["task_id"])],
                task_id=str(r["task_id"]),
                attempt=int(r["attempt"]),
                start=sec(r["started_at"]),
                end=sec(ended),
                outcome=None if running else _text(r.get("outcome")) or None,
                running=running,
                details=details,
            )
        )
        kind = _text(r.get("failure_kind"))
        if kind.startswith("timeout"):  # the attempt's end is where the timeout struck
            label = f"{kind.replace('_', ' ')} (attempt {int(r['attempt'])})"
            marks.append(Mark(bars[-1].lane, "timeout", bars[-1].end, bars[-1].end, label))
    marks += _transition_marks(steps, lane_of, sec, now)
    return Timeline(
        t0=t0,
        span=max(sec(now), 1e-9),
        lanes=lanes,
        bars=tuple(sorted(bars, key=lambda b: (b.lane, b.start))),
        marks=tuple(sorted(marks, key=lambda m: (m.lane, m.start))),
        slots=_slots(bars),
        title=title,
        live=live,
    )


def _transition_marks(
    steps: Iterable[Mapping[str, Any]],
    lane_of: Mapping[str, int],
    sec: Any,
    now: datetime,
) -> list[Mark]:
    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for t in steps:
        if t.get("at") is not None and str(t["task_id"]) in lane_of:
            by_task.setdefault(str(t["task_id"]), []).append(t)
    marks = []
    for tid, rows in by_task.items():
        lane = lane_of[tid]
        rows.sort(key=lambda t: int(t["version"]))
        open_since: dict[str, datetime] = {}
        asked_by: tuple[str, str] | None = None  # who asked for the stop, and why
        for t in rows:
            to = _text(t.get("to_status"))
            if to == "stopping":
                asked_by = (_text(t.get("actor")), _text(t.get("reason")))
            for kind, statuses in INTERVAL_MARKS.items():
                if to in statuses and kind not in open_since:
                    open_since[kind] = t["at"]
                elif to not in statuses and kind in open_since:
                    began = open_since.pop(kind)
                    marks.append(Mark(lane, kind, sec(began), sec(t["at"]), kind.replace("_", " ")))
            if to in ("stopped", "cancelled"):
                who, reason = asked_by or (_text(t.get("actor")), _text(t.get("reason")))
                who = who or "someone"
                label = f"{to} by {who}" + (f": {reason}" if reason else "")
                marks.append(Mark(lane, "stop", sec(t["at"]), sec(t["at"]), label))
        for kind, began in open_since.items():  # still waiting: open to now
            marks.append(Mark(lane, kind, sec(began), sec(now), kind.replace("_", " ")))
    return marks


def _slots(bars: Iterable[Bar]) -> tuple[tuple[float, int], ...]:
    edges = sorted(
        [(b.start, 1) for b in bars] + [(b.end, -1) for b in bars],
        key=lambda e: (e[0], e[1]),  # at the same instant the end (-1) comes first
    )
    steps: list[tuple[float, int]] = []
    running = 0
    for at, change in edges:
        running += change
        if steps and steps[-1][0] == at:
            steps[-1] = (at, running)
        else:
            steps.append((at, running))
    return tuple(steps)


# --- data for the front end ---------------------------------------------------------------

#: The mime type of a timeline's data; the JupyterLab extension draws it on a canvas
#: (``labextension/src/timeline.ts`` holds the same name).
TIMELINE_MIME = "application/vnd.chongming.timeline+json"


def to_json(tl: Timeline) -> dict[str, Any]:
    """Columns, not one object per bar: 10,000 attempts stay a few hundred kB. Each bar's
    attempt row is ``details[i]``, its values in the order of ``keys`` (``""`` when empty)."""
    keys: dict[str, None] = {}
    for b in tl.bars:
        for k, _ in b.details:
            keys.setdefault(k, None)
    order = {k: i for i, k in enumerate(keys)}
    details = []
    for b in tl.bars:
        row = [""] * len(order)
        for k, v in b.details:
            row[order[k]] = v
        details.append(row)
    t0 = None if tl.t0 is None else round(tl.t0.timestamp() * 1000, 3)
    return {
        "version": 1,
        "title": tl.title,
        "t0": t0,
        "span": tl.span,
        "lanes": [name for _, name in tl.lanes],
        "lane_ids": [tid for tid, _ in tl.lanes],
        "bars": {
            "lane": [b.lane for b in tl.bars],
            "start": [round(b.start, 6) for b in tl.bars],
            "end": [round(b.end, 6) for b in tl.bars],
            "tone": [b.tone for b in tl.bars],
            "attempt": [b.attempt for b in tl.bars],
            "running": [int(b.running) for b in tl.bars],
        },
        "keys": list(keys),
        "details": details,
        "marks": {
            "lane": [m.lane for m in tl.marks],
            "kind": [m.kind for m in tl.marks],
            "tone": [MARK_TONES[m.kind] for m in tl.marks],
            "start": [round(m.start, 6) for m in tl.marks],
            "end": [round(m.end, 6) for m in tl.marks],
            "label": [m.label for m in tl.marks],
        },
        "slots": [[round(at, 6), n] for at, n in tl.slots],
        "max_slots": tl.max_slots,
    }


# --- SVG ----------------------------------------------------------------------------------

LANE_HEIGHT = 18
LABEL_WIDTH = 160
PLOT_WIDTH = 640
STRIP_HEIGHT = 40
AXIS_HEIGHT = 22
#: Bars up to this many carry their attempt row as an SVG tooltip; a larger static picture
#: leaves them out (it would weigh megabytes; the canvas timeline shows every row).
SVG_TITLES_UP_TO = 2000


def to_svg(tl: Timeline) -> str:
    """A self-contained SVG document; every task name and message is escaped. Hovering a
    bar shows its attempt row (an SVG ``<title>``), in a browser or a saved notebook."""
    esc = html.escape
    n = len(tl.lanes)
    top = 20 if tl.title else 4
    lanes_h = max(n, 1) * LANE_HEIGHT
    height = top + lanes_h + AXIS_HEIGHT + STRIP_HEIGHT + 8
    width = LABEL_WIDTH + PLOT_WIDTH + 12
    span = tl.span or 1.0

    def x(t: float) -> float:
        return LABEL_WIDTH + PLOT_WIDTH * t / span

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="cn-timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{esc(tl.title or "attempt timeline")}" '
        'font-family="var(--jp-ui-font-family, sans-serif)" font-size="11">'
    ]
    fg = "var(--jp-ui-font-color1, #1f2328)"
    muted = "var(--jp-ui-font-color2, #57606a)"
    if tl.title:
        out.append(f'<text x="4" y="14" style="fill:{fg}" font-weight="600">{esc(tl.title)}</text>')
    if not tl.lanes:
        out.append(f'<text x="4" y="{top + 12}" style="fill:{muted}">no attempts yet</text></svg>')
        return "".join(out)
    for i, (_, name) in enumerate(tl.lanes):
        y = top + i * LANE_HEIGHT
        if i % 2:
            out.append(
                f'<rect x="0" y="{y}" width="{width}" height="{LANE_HEIGHT}" '
                'style="fill:var(--jp-layout-color2, #f3f4f6)"/>'
            )
        label = name if len(name) <= 24 else name[:23] + "…"
        out.append(
            f'<text x="4" y="{y + 13}" style="fill:{fg}"><title>{esc(name)}</title>'
            f"{esc(label)}</text>"
        )
    titles = len(tl.bars) <= SVG_TITLES_UP_TO
    for b in tl.bars:
        y = top + b.lane * LANE_HEIGHT
        tip = "\n".join(f"{k}: {v}" for k, v in b.details) if titles else ""
        out.append(
            f'<rect class="cn-bar cn-tone-{b.tone}" data-task="{esc(b.task_id)}" '
            f'data-attempt="{b.attempt}" x="{x(b.start):.1f}" y="{y + 3}" '
            f'width="{max(x(b.end) - x(b.start), 1.5):.1f}" height="{LANE_HEIGHT - 6}" rx="2" '
            f'style="fill:{TONE_COLOURS[b.tone]}"'
            + (' opacity="0.6"' if b.running else "")
            + (f"><title>{esc(tip)}</title></rect>" if titles else "/>")
        )
    # marks over the bars: a pause holds its slot, so it is drawn across the attempt
    for m in tl.marks:
        y = top + m.lane * LANE_HEIGHT
        colour = TONE_COLOURS[MARK_TONES[m.kind]]
        if m.kind in POINT_MARKS:
            px = x(m.start)
            out.append(
                f'<line class="cn-mark cn-mark-{m.kind}" x1="{px:.1f}" x2="{px:.1f}" '
                f'y1="{y + 1}" y2="{y + LANE_HEIGHT - 1}" style="stroke:{colour}" '
                f'stroke-width="2"><title>{esc(m.label)}</title></line>'
            )
        else:
            out.append(
                f'<rect class="cn-mark cn-mark-{m.kind}" x="{x(m.start):.1f}" y="{y + 3}" '
                f'width="{max(x(m.end) - x(m.start), 1):.1f}" height="{LANE_HEIGHT - 6}" '
                f'style="fill:{colour};stroke:{colour}" fill-opacity="0.35" '
                f'stroke-dasharray="3 2"><title>{esc(m.label)}</title></rect>'
            )
    axis_y = top + lanes_h
    out.append(
        f'<line x1="{LABEL_WIDTH}" x2="{LABEL_WIDTH + PLOT_WIDTH}" y1="{axis_y}" y2="{axis_y}" '
        f'style="stroke:{muted}"/>'
    )
    for k in range(5):
        t = span * k / 4
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        out.append(
            f'<text x="{x(t):.1f}" y="{axis_y + 14}" text-anchor="{anchor}" style="fill:{muted}">'
            f"{esc(human_seconds(t) if t else '0')}</text>"
        )
    # the slots strip: attempts running over time, as a step area
    strip_top = axis_y + AXIS_HEIGHT
    peak = max(tl.max_slots, 1)
    out.append(
        f'<text x="4" y="{strip_top + 12}" style="fill:{muted}">slots in use (max {tl.max_slots})'
        "</text>"
    )
    points = [f"{x(0):.1f},{strip_top + STRIP_HEIGHT}"]
    level = 0
    for at, count in tl.slots:
        yy_prev = strip_top + STRIP_HEIGHT - STRIP_HEIGHT * level / peak
        yy = strip_top + STRIP_HEIGHT - STRIP_HEIGHT * count / peak
        points.append(f"{x(at):.1f},{yy_prev:.1f}")
        points.append(f"{x(at):.1f},{yy:.1f}")
        level = count
    points.append(f"{x(span):.1f},{strip_top + STRIP_HEIGHT - STRIP_HEIGHT * level / peak:.1f}")
    points.append(f"{x(span):.1f},{strip_top + STRIP_HEIGHT}")
    out.append(
        f'<polygon class="cn-slots" points="{" ".join(points)}" '
        f'style="fill:{TONE_COLOURS["active"]}" opacity="0.35"/>'
    )
    out.append("</svg>")
    return "".join(out)


# --- matplotlib ---------------------------------------------------------------------------


def plot(tl: Timeline, ax: Any = None) -> Any:
    """The same picture as a matplotlib Figure (one lane per task, a slots strip below)."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - matplotlib is an optional extra
        raise ImportError(
            "Timeline.plot() needs matplotlib: pip install 'chongming-nb[examples]'"
        ) from exc
    n = max(len(tl.lanes), 1)
    if ax is None:
        fig, (ax, strip) = plt.subplots(
            2,
            1,
            figsize=(10, 0.3 * n + 1.6),
            sharex=True,
            gridspec_kw={"height_ratios": [max(n, 2), 1.2]},
        )
    else:
        fig, strip = ax.figure, None
    for b in tl.bars:
        ax.barh(
            b.lane,
            max(b.end - b.start, tl.span / 2000),
            left=b.start,
            height=0.7,
            color=TONE_HEX[b.tone],
            alpha=0.6 if b.running else 1.0,
        )
    for m in tl.marks:
        colour = TONE_HEX[MARK_TONES[m.kind]]
        if m.kind in POINT_MARKS:
            ax.vlines(m.start, m.lane - 0.4, m.lane + 0.4, colors=colour, linewidth=2)
        else:
            ax.hlines(m.lane, m.start, m.end, colors=colour, linestyles="dashed")
    ax.set_yticks(range(len(tl.lanes)), [name for _, name in tl.lanes])
    ax.set_ylim(len(tl.lanes) - 0.5, -0.5)
    ax.set_title(tl.title or "attempts")
    if strip is not None:
        xs = [0.0] + [at for at, _ in tl.slots] + [tl.span]
        ys = [0] + [count for _, count in tl.slots] + [tl.slots[-1][1] if tl.slots else 0]
        strip.step(xs, ys, where="post", color=TONE_HEX["active"])
        strip.fill_between(xs, ys, step="post", alpha=0.3, color=TONE_HEX["active"])
        strip.set_ylabel("slots")
        strip.set_xlabel("seconds")
    fig.tight_layout()
    return fig
