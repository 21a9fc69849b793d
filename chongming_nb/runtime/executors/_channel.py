"""What the process and dask executors share: the checks on what may leave the kernel,
the wire format of outcomes, upstream values resolved away from the controller, and the
Reporter a task sees when it runs away from the controller (every report becomes a
message on a channel).
"""

from __future__ import annotations

import io
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from chongming_nb.core.errors import ConfigurationError, TaskExecutionError
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors.base import ExecutionRequest, Outcome, Reporter
from chongming_nb.runtime.output import LineAssembler

#: How often the child's mirror thread (or a dask agent) samples heartbeats and flushes
#: progress when nothing pokes it.
HEARTBEAT_INTERVAL = 0.1
#: Progress reports closer together than this are merged in the child and sent later.
PROGRESS_INTERVAL = 0.05

THREAD_HINT = (
    "A task that runs in another process receives its function and arguments serialised "
    "with cloudpickle (functions defined in a notebook cell, lambdas and closures travel "
    "by value): pass arguments that can be pickled (not open files, locks, sockets, "
    "generators or connections; open them inside the task), or run it with "
    "executor='thread'."
)


def dumps(obj: Any) -> bytes:
    """What leaves the kernel for a process or a dask worker: cloudpickle, so that objects
    importable by name travel by reference and the rest (``__main__``, lambdas, closures)
    by value. The receiving side reads it with plain ``pickle.loads``."""
    data: bytes = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return data


class UnavailableUpstream:
    """Stands in for an upstream value that could not be sent to where the task runs."""

    __slots__ = ("error", "task_id")

    def __init__(self, task_id: str, error: str) -> None:
        self.task_id = task_id
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (UnavailableUpstream, (self.task_id, self.error))


def resolve_upstream(ups: Mapping[str, Any] | None, key: Any, task_name: str) -> Any:
    """``ctx.upstream(key)`` away from the controller: the same lookup rules (task id,
    handle, node name, task name) over the values sent with the request."""
    ups = ups or {}
    names: Mapping[str, str] = ups.get("__names__", {})
    tid = getattr(key, "id", None) or getattr(key, "task_id", None) or key
    found: str | None = None
    if isinstance(tid, str) and tid != "__names__" and tid in ups:
        found = tid
    else:
        node = key if isinstance(key, str) else getattr(key, "name", None)
        if isinstance(node, str) and names.get(node) in ups:
            found = names[node]
    if found is None:
        known = sorted(n for n in names if names[n] in ups)
        raise KeyError(f"{key!r} is not a succeeded upstream of {task_name!r} (upstreams: {known})")
    value = ups[found]
    if isinstance(value, UnavailableUpstream):
        raise ConfigurationError(
            f"upstream {key!r} of {task_name!r} could not be sent to the worker: {value.error}"
        )
    return value


def describe_unpicklable(
    dumps: Callable[[Any], bytes], target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str | None:
    """None when (target, args, kwargs) pickle; else which part failed and why."""
    try:
        dumps((target, args, kwargs))
        return None
    except Exception as exc:
        whole = f"{type(exc).__name__}: {exc}"
    name = getattr(target, "__qualname__", None) or repr(target)
    try:
        dumps(target)
    except Exception as exc:
        return f"the task function {name!r} cannot be pickled ({type(exc).__name__}: {exc})"
    for i, a in enumerate(args):
        try:
            dumps(a)
        except Exception as exc:
            return f"argument {i} of {name!r} cannot be pickled ({type(exc).__name__}: {exc})"
    for k, v in kwargs.items():
        try:
            dumps(v)
        except Exception as exc:
            return f"argument {k}= of {name!r} cannot be pickled ({type(exc).__name__}: {exc})"
    return f"the arguments of {name!r} cannot be pickled ({whole})"


def check_process_target(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise ConfigurationError, naming the part, unless (target, args, kwargs) serialise
    for a child process."""
    why = describe_unpicklable(dumps, target, args, kwargs)
    if why is not None:
        raise ConfigurationError(f"the process executor cannot run this task: {why}. {THREAD_HINT}")


def portable_upstream(
    ups: Mapping[str, Any] | None, dumps: Callable[[Any], bytes]
) -> dict[str, Any] | None:
    """The upstream values that pickle; the others replaced by UnavailableUpstream."""
    if not ups:
        return None
    out: dict[str, Any] = {}
    for k, v in ups.items():
        try:
            dumps(v)
            out[k] = v
        except Exception as exc:
            out[k] = UnavailableUpstream(k, f"{type(exc).__name__}: {exc}")
    return out


def outcome_to_wire(outcome: Outcome, dumps: Callable[[Any], bytes]) -> dict[str, Any]:
    """An Outcome as a plain dict that is guaranteed to pickle (value and exception
    replaced by a clear failure when they cannot travel)."""
    wire: dict[str, Any] = {
        "kind": outcome.kind,
        "value": None,
        "exception": None,
        "traceback": outcome.traceback,
        "message": outcome.message,
        "exit_code": outcome.exit_code,
        "exception_type": outcome.exception_type,
    }
    if outcome.kind == "succeeded":
        try:
            dumps(outcome.value)
            wire["value"] = outcome.value
        except Exception as exc:
            wire.update(
                kind="failed",
                exception=TaskExecutionError(
                    f"the task's result ({type(outcome.value).__name__}) cannot be sent back "
                    f"from the worker: {type(exc).__name__}: {exc}"
                ),
                message=f"result cannot be pickled: {type(exc).__name__}: {exc}",
                exception_type="chongming_nb.core.errors.TaskExecutionError",
            )
    elif outcome.exception is not None:
        try:
            dumps(outcome.exception)
            wire["exception"] = outcome.exception
        except Exception:
            wire["exception"] = TaskExecutionError(outcome.message or "failed")
    return wire


def outcome_from_wire(wire: Mapping[str, Any]) -> Outcome:
    return Outcome(
        wire["kind"],
        value=wire.get("value"),
        exception=wire.get("exception"),
        traceback=wire.get("traceback"),
        message=wire.get("message"),
        exit_code=wire.get("exit_code"),
        exception_type=wire.get("exception_type"),
    )


def safe_payload(payload: Any, dumps: Callable[[Any], bytes]) -> Any:
    try:
        dumps(payload)
        return payload
    except Exception:
        return repr(payload)


class ChannelReporter:
    """The Reporter a task sees when it runs away from the controller.

    Every report becomes a message tuple handed to ``send``; progress is merged and
    throttled (``flush_progress`` sends what is pending). The pause handshake is the
    subclass's business (it needs an answer from the controller).
    """

    def __init__(self, send: Callable[[tuple[Any, ...]], None], request: ExecutionRequest) -> None:
        self._send = send
        self._request = request
        self._plock = threading.Lock()
        self._pending: list[Any] | None = None
        self._sent_at = -1e18
        self.pid: int | None = None
        self.where: str | None = None

    def send(self, msg: tuple[Any, ...]) -> None:
        self._send(msg)

    def started(self, pid: int | None = None) -> None:
        self._send(("started", self.pid if pid is None else pid, self.where))

    def progress(
        self, done: float | None, total: float | None, unit: str | None, message: str | None
    ) -> None:
        now = time.monotonic()
        with self._plock:
            p = self._pending
            if p is None:
                p = self._pending = [done, total, unit, message]
            else:
                for i, v in enumerate((done, total, unit, message)):
                    if v is not None:
                        p[i] = v
            final = p[0] is not None and p[1] is not None and p[0] >= p[1]
            if not final and now - self._sent_at < PROGRESS_INTERVAL:
                return
            self._pending = None
            self._sent_at = now
        self._send(("progress", *p))

    def flush_progress(self) -> None:
        with self._plock:
            p, self._pending = self._pending, None
            if p is None:
                return
            self._sent_at = time.monotonic()
        self._send(("progress", *p))

    def emit(self, kind: str, payload: Any) -> None:
        self._send(("emit", kind, safe_payload(payload, pickle.dumps)))

    def log(self, stream: str, line: str, level: str | None) -> None:
        self._send(("log", stream, line, level))

    def pause_reached(self) -> bool:  # pragma: no cover - overridden
        return False

    def resumed(self) -> None:
        self._send(("resumed",))

    def heartbeat(self) -> None:
        self._send(("beat", False))

    def upstream(self, key: Any) -> Any:
        return resolve_upstream(self._request.upstream, key, self._request.name)

    def finished(self, outcome: Outcome) -> None:  # pragma: no cover - the runner sends it
        self._send(("finished", outcome_to_wire(outcome, pickle.dumps)))


def deliver(msg: tuple[Any, ...], reporter: Reporter, token: CancellationToken) -> None:
    """Parent side: hand one message from the channel to the controller's reporter.
    ("finished" and "pause" are handled by the caller.)"""
    kind = msg[0]
    if kind == "progress":
        token.beats += 1
        reporter.progress(msg[1], msg[2], msg[3], msg[4])
    elif kind == "beat":
        token.beats += 1
        token.paused = bool(msg[1])
        reporter.heartbeat()
    elif kind == "log":
        reporter.log(msg[1], msg[2], msg[3])
    elif kind == "emit":
        reporter.emit(msg[1], msg[2])
    elif kind == "resumed":
        token.paused = False
        token.beats += 1
        reporter.resumed()
    elif kind == "started":
        # the idle clock starts now, not at launch (a child or a worker may take a while
        # to come up, and that is no sign of a stuck task)
        token.beats += 1
        reporter.heartbeat()
        reporter.started(msg[1])


class LineWriter(io.TextIOBase):
    """A text stream that turns every complete line into a log line (for threads the task
    starts itself, whose output the per-thread capture does not see). Lines are
    assembled as the capture does (``\r`` redraws, long lines cut); ``flush`` emits an
    unterminated rest, as the end of an attempt does."""

    def __init__(self, stream: str, sink: Callable[[str, str, str | None], None]) -> None:
        self._asm = LineAssembler(stream, sink)
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        with self._lock:
            self._asm.write(s)
        return len(s)

    def flush(self) -> None:
        with self._lock:
            self._asm.flush()
