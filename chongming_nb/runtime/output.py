"""Per-task output capture.

ipykernel 7 routes a background thread's print() to whichever cell happens to be
executing. While an attempt runs, a context variable names its :class:`Capture`; we
install (once) a proxy over ``sys.stdout`` / ``sys.stderr`` that sends writes made in
that context into the task's log, line by line, and lets every other write through
untouched.

Logging stays the user's: no handler is added to the root logger and
``logging.lastResort`` is left alone (a handler on the root would silence lastResort and
turn a later ``logging.basicConfig()`` into a no-op). Instead the log-record factory is
wrapped: a record *created* inside a task (its logger enabled for its level) is copied
into the task's log; every record, inside a task or not, then flows to the user's
handlers as it always did.

Lines are assembled like a terminal shows them, in time linear in the bytes written
whatever the line endings: ``\\n`` ends a line, ``\\r`` returns to its start (what
follows replaces the line, so a progress bar that redraws itself leaves its last state),
and a line longer than :data:`MAX_LINE_CHARS` keeps its head and says how much was cut.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TextIO

__all__ = [
    "MAX_LINE_CHARS",
    "Capture",
    "LineAssembler",
    "LineSink",
    "StreamProxy",
    "capture",
    "current_capture",
    "install",
]

LineSink = Callable[[str, str, str | None], None]  # (stream, line, level)

#: Characters kept of one output line (a longer line keeps its head, with a marker).
MAX_LINE_CHARS = 65_536

_install_lock = threading.Lock()


class LineAssembler:
    """Turns the writes of one stream into complete lines for ``sink``.

    Invariant: ``_parts`` joined is the visible text of the current line, ``_size`` its
    length (at most ``limit``); ``_cut`` counts the characters dropped past the limit;
    ``_cr`` says a carriage return was written since the last visible character (the
    next text replaces the line; a newline keeps it, as ``\\r\\n`` does on a terminal).
    Each written character is looked at a constant number of times.
    """

    __slots__ = ("_cr", "_cut", "_parts", "_size", "limit", "sink", "stream")

    def __init__(self, stream: str, sink: LineSink, limit: int = MAX_LINE_CHARS) -> None:
        self.stream = stream
        self.sink = sink
        self.limit = limit
        self._parts: list[str] = []
        self._size = 0
        self._cut = 0
        self._cr = False

    def _add(self, text: str) -> None:
        """Text without line endings, at the cursor (the end of the line, or its start
        after a carriage return)."""
        if not text:
            return
        if self._cr:
            self._parts.clear()
            self._size = 0
            self._cut = 0
            self._cr = False
        room = self.limit - self._size
        if len(text) > room:
            self._cut += len(text) - room
            text = text[:room]
            if not text:
                return
        self._parts.append(text)
        self._size += len(text)

    def _segment(self, seg: str) -> None:
        if "\r" not in seg:
            self._add(seg)
            return
        pieces = seg.split("\r")
        self._add(pieces[0])
        for piece in pieces[1:]:
            self._cr = True
            self._add(piece)

    def _emit(self) -> None:
        line = "".join(self._parts)
        if self._cut:
            line += f" … [{self._cut} more characters not kept]"
        self._parts.clear()
        self._size = 0
        self._cut = 0
        self._cr = False
        self.sink(self.stream, line, None)

    def write(self, s: str) -> None:
        if "\n" not in s:
            self._segment(s)
            return
        segments = s.split("\n")
        for seg in segments[:-1]:
            self._segment(seg)
            self._emit()
        self._segment(segments[-1])

    def flush(self) -> None:
        """Emit the unterminated rest of the line, if there is one."""
        if self._parts or self._cut:
            self._emit()
        self._cr = False


class Capture:
    """One attempt's capture, and the context manager that binds it to the current
    context: its sink and a line assembler per stream (made by the first write: most
    tasks print nothing)."""

    __slots__ = ("_streams", "_token", "sink")

    def __init__(self, sink: LineSink) -> None:
        self.sink = sink
        self._streams: dict[str, LineAssembler] | None = None
        self._token: Any = None

    def __enter__(self) -> Capture:
        install()
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._token)
        self.close()

    def write(self, stream: str, s: str) -> None:
        streams = self._streams
        if streams is None:
            streams = self._streams = {}
        asm = streams.get(stream)
        if asm is None:
            asm = streams[stream] = LineAssembler(stream, self.sink)
        asm.write(s)

    def record(self, record: logging.LogRecord) -> None:
        # the task's own ctx.log speaks for the task: its lines need no logger name;
        # another logger's lines say which library they come from
        formatter = _OWN_FORMATTER if record.name == TASK_LOGGER_NAME else _FORMATTER
        try:
            msg = formatter.format(record)
        except Exception:  # a bad format string must not break the task
            try:
                msg = f"{record.name}: {record.msg!s}"
            except Exception:
                msg = f"{record.name}: <unprintable log message>"
        for line in msg.splitlines() or [""]:
            self.sink("log", line[:MAX_LINE_CHARS], record.levelname)

    def close(self) -> None:
        """Emit what is left of unterminated lines."""
        streams, self._streams = self._streams, None
        for asm in (streams or {}).values():
            asm.flush()


#: The capture of the attempt running in this context (None outside tasks).
_current: ContextVar[Capture | None] = ContextVar("chongming_nb_capture", default=None)
_FORMATTER = logging.Formatter("%(name)s: %(message)s")
_OWN_FORMATTER = logging.Formatter("%(message)s")
#: The logger behind ``ctx.log``.
TASK_LOGGER_NAME = "chongming_nb.tasks"


def current_capture() -> Capture | None:
    return _current.get()


def capture(sink: LineSink) -> Capture:
    """``with capture(sink):`` output and log records made in this context go to
    ``sink(stream, line, level)``."""
    return Capture(sink)


class StreamProxy:
    """Stands in for sys.stdout/sys.stderr; writes made inside a task go to its log."""

    def __init__(self, name: str, target: TextIO) -> None:
        self._name = name
        self._target = target

    def write(self, s: str) -> int:
        cap = _current.get()
        if cap is None:
            return self._target.write(s)
        if self._name == "stderr" and _echo.get() is not None and _last_resort_echo(s):
            return len(s)
        cap.write(self._name, s)
        return len(s)

    def flush(self) -> None:
        if _current.get() is None:
            self._target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


# ------------------------------------------------------------------ logging

#: A record captured inside a task that nothing but ``logging.lastResort`` will handle:
#: lastResort then writes it to sys.stderr (our proxy), and that one write is dropped,
#: so the record shows once, with its level, and lastResort stays as it was.
_echo: ContextVar[logging.LogRecord | None] = ContextVar("chongming_nb_echo", default=None)


def _last_resort_echo(s: str) -> bool:
    rec = _echo.get()
    if rec is None:
        return False
    _echo.set(None)
    last = logging.lastResort
    if last is None:
        return False
    try:
        return s == last.format(rec) + getattr(last, "terminator", "\n")
    except Exception:
        return False


def _only_last_resort(record: logging.LogRecord) -> bool:
    """Will ``logging.lastResort`` be the one to handle this record (no handler on the
    way from its logger up, as ``Logger.callHandlers`` walks it)?"""
    last = logging.lastResort
    if last is None or record.levelno < last.level:
        return False
    c: logging.Logger | None = logging.getLogger(record.name) if record.name != "root" else None
    if c is None:
        c = logging.getLogger()
    while c is not None:
        if c.handlers:
            return False
        c = c.parent if c.propagate else None  # type: ignore[assignment]
    return True


class _TaskRecordFactory:
    """Wraps the log-record factory: a record made inside a task is copied to its log."""

    __slots__ = ("inner",)

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        cap = _current.get()
        # (a factory of the user's that wraps ours, wrapped again: the record is copied once)
        if cap is not None and not hasattr(record, "_chongming_copied"):
            record._chongming_copied = True
            cap.record(record)
            if _only_last_resort(record):
                _echo.set(record)
        return record


def _in_place() -> bool:
    return (
        type(sys.stdout) is StreamProxy
        and type(sys.stderr) is StreamProxy
        and type(logging.getLogRecordFactory()) is _TaskRecordFactory
    )


_tasks_logger = logging.getLogger(TASK_LOGGER_NAME)


def install() -> None:
    """Idempotent: wrap the current sys streams and record factory (again, if
    something replaced them)."""
    if _in_place():
        return  # already in place: no lock on every attempt's hot path
    with _install_lock:
        if not isinstance(sys.stdout, StreamProxy):
            sys.stdout = StreamProxy("stdout", sys.stdout)  # type: ignore[assignment]
        if not isinstance(sys.stderr, StreamProxy):
            sys.stderr = StreamProxy("stderr", sys.stderr)  # type: ignore[assignment]
        factory = logging.getLogRecordFactory()
        if not isinstance(factory, _TaskRecordFactory):
            logging.setLogRecordFactory(_TaskRecordFactory(factory))
        # ``ctx.log``'s logger does not propagate: its records reach the task log through
        # the factory, and a NullHandler keeps lastResort from echoing them elsewhere
        if not _tasks_logger.handlers:
            _tasks_logger.addHandler(logging.NullHandler())
