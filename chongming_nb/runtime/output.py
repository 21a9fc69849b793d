"""Per-task output capture.

ipykernel 7 routes a background thread's print() to whichever cell happens to be
executing. We install (once) a proxy over ``sys.stdout`` / ``sys.stderr`` that sends
writes from a thread running a task into that task's log, line by line, and lets every
other write through untouched. A logging handler does the same for log records.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

LineSink = Callable[[str, str, str | None], None]  # (stream, line, level)

_local = threading.local()
_install_lock = threading.Lock()


def current_sink() -> LineSink | None:
    return getattr(_local, "sink", None)


class _Capture:
    """Context manager binding the current thread's output to a task's sink."""

    __slots__ = ("_prev", "sink")

    def __init__(self, sink: LineSink) -> None:
        self.sink = sink
        self._prev: LineSink | None = None

    def __enter__(self) -> None:
        install()
        self._prev = getattr(_local, "sink", None)
        _local.sink = self.sink
        _local.buffers = None  # made by the first write (most tasks print nothing)

    def __exit__(self, *exc: object) -> None:
        bufs: dict[str, str] | None = getattr(_local, "buffers", None)
        if bufs:
            for stream, rest in bufs.items():
                if rest:
                    self.sink(stream, rest, None)
        _local.buffers = None
        _local.sink = self._prev


def capture(sink: LineSink) -> _Capture:
    return _Capture(sink)


class StreamProxy:
    """Stands in for sys.stdout/sys.stderr; task threads write to their task's log."""

    def __init__(self, name: str, target: TextIO) -> None:
        self._name = name
        self._target = target

    def write(self, s: str) -> int:
        sink = getattr(_local, "sink", None)
        if sink is None:
            return self._target.write(s)
        bufs: dict[str, str] | None = getattr(_local, "buffers", None)
        if bufs is None:
            bufs = _local.buffers = {}
        text = bufs.get(self._name, "") + s
        *lines, rest = text.split("\n")
        bufs[self._name] = rest
        for line in lines:
            sink(self._name, line, None)
        return len(s)

    def flush(self) -> None:
        if getattr(_local, "sink", None) is None:
            self._target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


class _TaskLogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        sink = getattr(_local, "sink", None)
        if sink is None:
            return
        try:
            msg = self.format(record)
        except Exception:  # a bad format string must not break the task
            msg = str(record.msg)
        for line in msg.splitlines() or [""]:
            sink("log", line, record.levelname)


_handler = _TaskLogHandler()
_handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
_root_logger = logging.getLogger()
_tasks_logger = logging.getLogger("chongming_nb.tasks")


def _in_place() -> bool:
    return (
        type(sys.stdout) is StreamProxy
        and type(sys.stderr) is StreamProxy
        and _handler in _root_logger.handlers
        and _handler in _tasks_logger.handlers
    )


def install() -> None:
    """Idempotent: wrap the current sys streams (again, if something replaced them)."""
    if _in_place():
        return  # already in place: no lock on every attempt's hot path
    with _install_lock:
        if not isinstance(sys.stdout, StreamProxy):
            sys.stdout = StreamProxy("stdout", sys.stdout)  # type: ignore[assignment]
        if not isinstance(sys.stderr, StreamProxy):
            sys.stderr = StreamProxy("stderr", sys.stderr)  # type: ignore[assignment]
        # the root for user loggers; ``ctx.log``'s logger does not propagate, so it gets
        # the handler itself (otherwise its records would reach no task log at all)
        for logger in (_root_logger, _tasks_logger):
            if _handler not in logger.handlers:
                logger.addHandler(_handler)
