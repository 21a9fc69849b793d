"""ProcessExecutor: each attempt in its own (daemon) child process.

What it buys, and only it: a stop that is guaranteed to end the work (terminate, then
kill), CPU parallelism past the GIL, and crash isolation (a segfault takes down the child,
not the kernel). What it costs, by construction:

* ``target``, ``args`` and ``kwargs`` must pickle by reference: no lambdas, closures,
  functions defined inside other functions, and no functions defined in the notebook
  itself (put them in a ``.py`` module and import it). This is checked when the task is
  submitted and again at launch, with a ``ConfigurationError`` that says what failed and
  suggests ``executor="thread"``.
* The child is a daemon process, so the task cannot start processes of its own.
* Stop and pause reach the child through ``multiprocessing.Event`` objects mirrored into
  the child's own CancellationToken by a small thread, so they land at the next
  checkpoint a few milliseconds later than with threads.

How it works (seed 001 §13.8): the parent pickles the request and starts a child from a
``forkserver`` (measured here: ~25 ms per start against ~130 ms for ``spawn``; ``fork``
is unsafe in a kernel full of threads). The child rebuilds a TaskContext around a local
token; a mirror thread copies the stop/pause Events into it, samples the token's beat
counter and sends throttled heartbeats (also while paused: a paused task is not stuck),
and flushes throttled progress. Every message travels over one pipe guarded by a lock,
since two threads write. In the parent a reader thread drains the pipe whether or not
anyone waits, and calls the Reporter. Liveness is ``Process.is_alive()``, never pipe EOF.

Stop: the controller asks for a cooperative stop; if the grace window runs out it calls
``on_stop_timeout()``: terminate, wait ``terminate_grace``, kill, and report "killed" (a
known outcome: STOPPED, not LOST; ``running`` is False afterwards). A child that dies on
its own (exception in C, ``os.abort()``, a segfault) ends as ``Outcome("crashed")`` with
its exit code; when it had already started, the message says the result is unknown and
partial side effects are possible.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import traceback as tb
import weakref
from collections.abc import Callable, Mapping
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from chongming_nb.core.errors import ConfigurationError, TaskExecutionError
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors.base import (
    ExecutionRequest,
    Outcome,
    Reporter,
    StopVerdict,
    run_attempt,
)

#: How often the child's mirror thread wakes without being poked: heartbeat sampling and
#: progress flushing happen at this rate.
HEARTBEAT_INTERVAL = 0.1
#: Progress reports closer together than this are merged in the child and sent later.
PROGRESS_INTERVAL = 0.05

_THREAD_HINT = (
    "A process can only run functions it can import: define the task at module level in a "
    "file (not a lambda, a closure or a function defined in a notebook cell), make its "
    "arguments picklable, or run it with executor='thread'."
)

# ----------------------------------------------------------------------------------
# Pieces shared with the dask executor: request checks, wire format of outcomes,
# upstream values resolved away from the controller, a reporter that talks to a channel.


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


def _describe_unpicklable(
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


def _interactive_main(target: Any) -> bool:
    """Defined in ``__main__`` of an interactive session (a notebook cell, a REPL)?"""
    if getattr(target, "__module__", None) != "__main__":
        return False
    main = sys.modules.get("__main__")
    return main is None or not getattr(main, "__file__", None)


def check_process_target(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise ConfigurationError unless a child process can receive and load this task."""
    if _interactive_main(target):
        name = getattr(target, "__qualname__", repr(target))
        raise ConfigurationError(
            f"the process executor cannot run {name!r}: it is defined in the interactive "
            f"session (__main__), which a child process cannot import. {_THREAD_HINT}"
        )
    why = _describe_unpicklable(pickle.dumps, target, args, kwargs)
    if why is not None:
        raise ConfigurationError(
            f"the process executor cannot run this task: {why}. {_THREAD_HINT}"
        )


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
    starts itself, whose output the per-thread capture does not see)."""

    def __init__(self, stream: str, sink: Callable[[str, str, str | None], None]) -> None:
        self._stream = stream
        self._sink = sink
        self._buf = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        with self._lock:
            text = self._buf + s
            *lines, self._buf = text.split("\n")
        for line in lines:
            self._sink(self._stream, line, None)
        return len(s)

    def flush(self) -> None:
        with self._lock:
            rest, self._buf = self._buf, ""
        if rest:
            self._sink(self._stream, rest, None)


# ----------------------------------------------------------------------------------
# The child


class _ChildReporter(ChannelReporter):
    def __init__(
        self,
        send: Callable[[tuple[Any, ...]], None],
        request: ExecutionRequest,
        conn: multiprocessing.connection.Connection,
        stop_ev: Any,
    ) -> None:
        super().__init__(send, request)
        self._conn = conn
        self._stop_ev = stop_ev
        self._pause_seq = 0
        self.pid = os.getpid()

    def pause_reached(self) -> bool:
        """Ask the controller whether to block now; the answer comes back on the pipe
        (only this thread reads it). A stop while waiting wins."""
        self.flush_progress()
        self._pause_seq += 1
        seq = self._pause_seq
        self._send(("pause", seq))
        while True:
            if self._conn.poll(0.05):
                msg = self._conn.recv()
                if msg[0] == "ack" and msg[1] == seq:
                    return bool(msg[2])
                continue  # a stale answer to an earlier question
            if self._stop_ev.is_set():
                return False


def _child_main(
    conn: multiprocessing.connection.Connection,
    stop_ev: Any,
    pause_ev: Any,
    wake_ev: Any,
    reason: Any,
    payload: bytes,
    sys_path: list[str],
    cwd: str,
    crash_path: str,
) -> None:
    """Entry point of the child process."""
    # a hard crash (segfault, abort) writes the Python stacks here for the parent
    with contextlib.suppress(OSError):
        crash_file = open(crash_path, "w")  # noqa: SIM115 - must stay open until exit
        faulthandler.enable(file=crash_file, all_threads=True)
    sys.path[:] = sys_path
    with contextlib.suppress(OSError):
        os.chdir(cwd)
    lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        data = pickle.dumps(msg)
        with lock:
            conn.send_bytes(data)

    try:
        request: ExecutionRequest = pickle.loads(payload)
    except BaseException as exc:
        send(
            (
                "finished",
                {
                    "kind": "failed",
                    "exception": TaskExecutionError(f"could not load the task: {exc}"),
                    "traceback": "".join(tb.format_exception(exc)),
                    "message": f"the child process could not load the task "
                    f"({type(exc).__name__}: {exc}). {_THREAD_HINT}",
                    "exception_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                },
            )
        )
        return
    reporter = _ChildReporter(send, request, conn, stop_ev)
    # Threads the task starts print too: their lines go to the task's log as well.
    sys.stdout = LineWriter("stdout", reporter.log)
    sys.stderr = LineWriter("stderr", reporter.log)
    token = CancellationToken()
    done = threading.Event()

    def mirror() -> None:
        last_beats = token.beats
        token.arm_probe()  # checkpoints count only when they answer a probe (heartbeat.py)
        while not done.is_set():
            wake_ev.wait(HEARTBEAT_INTERVAL)
            wake_ev.clear()
            if done.is_set():
                return
            if stop_ev.is_set():
                if not token.stop_requested:
                    why = bytes(reason.value).decode("utf-8", "replace") or None
                    token.request_stop(why)
            elif pause_ev.is_set():
                if not token.pause_requested:
                    token.request_pause()
            elif token.pause_requested:
                token.resume()
            reporter.flush_progress()
            beats = token.beats
            token.arm_probe()  # after the read: the next answer shows at the next sample
            if beats != last_beats or token.paused:
                last_beats = beats
                try:
                    send(("beat", token.paused))
                except OSError:
                    return

    mirror_thread = threading.Thread(target=mirror, name="chongming-mirror", daemon=True)
    mirror_thread.start()
    try:
        outcome = run_attempt(request, token, reporter)
    finally:
        done.set()
        wake_ev.set()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    reporter.flush_progress()
    send(("finished", outcome_to_wire(outcome, pickle.dumps)))


# ----------------------------------------------------------------------------------
# The parent


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return ""
    try:
        return f", {signal.Signals(-code).name}"
    except ValueError:
        return ""


class ProcessHandle:
    """Control over one attempt running in a child process."""

    def __init__(
        self,
        process: BaseProcess,
        conn: multiprocessing.connection.Connection,
        stop_ev: Any,
        pause_ev: Any,
        wake_ev: Any,
        reason: Any,
        reporter: Reporter,
        terminate_grace: float,
        crash_path: str | None = None,
    ) -> None:
        self.token = CancellationToken()  # the parent's view: beats and paused, for heartbeats
        self.process = process
        self._conn = conn
        self._stop_ev = stop_ev
        self._pause_ev = pause_ev
        self._wake_ev = wake_ev
        self._reason = reason
        self._reporter = reporter
        self._grace = terminate_grace
        self._crash_path = crash_path
        self._send_lock = threading.Lock()
        self.killed = False
        self.started = False
        self.finished = threading.Event()
        self.exit_code: int | None = None
        self._reader = threading.Thread(
            target=self._read_loop, name=f"chongming-proc-reader-{process.pid}", daemon=True
        )

    # -------------------------------------------------------------- protocol

    @property
    def running(self) -> bool:
        return self.process.is_alive()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def supports_pause(self) -> bool:
        return True

    def request_stop(self, reason: str | None = None) -> None:
        if reason and not self._stop_ev.is_set():
            data = reason.encode("utf-8", "replace")[: len(self._reason) - 1]
            self._reason.value = data
        self.token.request_stop(reason)
        self._stop_ev.set()
        self._wake_ev.set()

    def request_pause(self) -> None:
        self._pause_ev.set()
        self._wake_ev.set()

    def resume(self) -> None:
        self._pause_ev.clear()
        self._wake_ev.set()

    def on_stop_timeout(self) -> StopVerdict:
        """The cooperative window ran out: terminate, wait, kill. A known outcome."""
        if self.finished.is_set() or not self.process.is_alive():
            return "gone"
        self.killed = True
        self.process.terminate()
        self.process.join(self._grace)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        return "killed"

    def join(self, timeout: float | None = None) -> bool:
        return self.finished.wait(timeout)

    # ---------------------------------------------------------------- reader

    def _answer(self, msg: tuple[Any, ...]) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            self._conn.send(msg)

    def _read_loop(self) -> None:
        wire: dict[str, Any] | None = None
        reporter = self._reporter
        conn = self._conn
        try:
            while wire is None:
                try:
                    if not conn.poll(HEARTBEAT_INTERVAL):
                        if not self.process.is_alive() and not conn.poll(0):
                            break
                        continue
                    msg = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    break
                except Exception:  # a message that does not unpickle here: skip it
                    continue
                kind = msg[0]
                if self.killed:
                    continue
                if kind == "finished":
                    wire = msg[1]
                elif kind == "pause":
                    ok = False
                    # a failure on the controller's side means "do not pause"; the reader
                    # must go on (stopping it would kill a healthy task)
                    with contextlib.suppress(Exception):
                        ok = bool(reporter.pause_reached())
                    if ok:
                        self.token.paused = True
                    self._answer(("ack", msg[1], ok))
                else:
                    if kind == "started":
                        self.started = True
                    # a failure on the controller's side must not stop the reader
                    with contextlib.suppress(Exception):
                        deliver(msg, reporter, self.token)
        finally:
            try:
                outcome = self._settle(wire)
            finally:
                self._drop_crash_file()
            self.token.paused = False
            with contextlib.suppress(OSError):
                conn.close()
            self.finished.set()
            reporter.finished(outcome)

    def _settle(self, wire: dict[str, Any] | None) -> Outcome:
        p = self.process
        p.join(2.0 if wire is not None else 5.0)
        if p.is_alive():
            # the task returned but left non-daemon threads behind: end them
            p.terminate()
            p.join(self._grace)
            if p.is_alive():
                p.kill()
                p.join(5.0)
        self.exit_code = p.exitcode
        if self.killed:
            return Outcome(
                "cancelled", message="terminated after the stop window", exit_code=p.exitcode
            )
        if wire is not None:
            return outcome_from_wire(wire)
        code = p.exitcode
        stacks = self._crash_report()
        where = f"exit code {code}{_signal_name(code)}"
        if self.started:
            message = (
                f"the task's process died ({where}); result unknown, partial side effects possible"
            )
        else:
            message = f"the task's process died before the task started ({where})"
        return Outcome(
            "crashed",
            message=message,
            exit_code=code,
            exception_type="ProcessDied",
            traceback=stacks,
        )

    def _crash_report(self) -> str | None:
        """What faulthandler wrote in the child when it crashed (None if nothing)."""
        if self._crash_path is None:
            return None
        try:
            with open(self._crash_path, encoding="utf-8", errors="replace") as f:
                text = f.read().strip()
        except OSError:
            return None
        return text or None

    def _drop_crash_file(self) -> None:
        if self._crash_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._crash_path)


_ctx_lock = threading.Lock()
_contexts: dict[str, BaseContext] = {}


def _context(method: str) -> BaseContext:
    with _ctx_lock:
        ctx = _contexts.get(method)
        if ctx is None:
            ctx = multiprocessing.get_context(method)
            if method == "forkserver":
                # forked children start with the runtime already imported
                ctx.set_forkserver_preload(["chongming_nb.runtime.executors.process"])
            _contexts[method] = ctx
        return ctx


def _default_method() -> str:
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class ProcessExecutor:
    """Runs each attempt in a daemon child process (hard stop, no GIL, crash isolation).

    ``start_method``: "forkserver" (default where available) or "spawn". ``fork`` is
    refused: the kernel runs threads, and forking a process with threads can deadlock the
    child. ``terminate_grace``: after SIGTERM, how long to wait before SIGKILL.
    """

    name = "process"

    def __init__(self, start_method: str | None = None, terminate_grace: float = 1.0) -> None:
        method = start_method or _default_method()
        if method not in ("forkserver", "spawn"):
            raise ConfigurationError(
                f"start_method must be 'forkserver' or 'spawn', got {method!r} "
                "(fork is unsafe in a process with threads, such as a Jupyter kernel)"
            )
        if method not in multiprocessing.get_all_start_methods():
            raise ConfigurationError(f"start method {method!r} is not available on this system")
        if not isinstance(terminate_grace, int | float) or terminate_grace < 0:
            raise ConfigurationError(f"terminate_grace must be >= 0, got {terminate_grace!r}")
        self.start_method = method
        self.terminate_grace = float(terminate_grace)
        self._handles: weakref.WeakSet[ProcessHandle] = weakref.WeakSet()
        self._lock = threading.Lock()

    def validate(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Submit-time check: raise ConfigurationError unless a child can load this task."""
        check_process_target(target, args, kwargs)

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> ProcessHandle:
        check_process_target(request.target, request.args, request.kwargs)
        upstream = portable_upstream(request.upstream, pickle.dumps)
        if upstream is not request.upstream:
            from dataclasses import replace

            request = replace(request, upstream=upstream)
        try:
            payload = pickle.dumps(request)
        except Exception as exc:  # something else in the request (a deadline subclass...)
            raise ConfigurationError(
                f"the process executor cannot send this task: {type(exc).__name__}: {exc}. "
                f"{_THREAD_HINT}"
            ) from exc
        ctx = _context(self.start_method)
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        stop_ev, pause_ev, wake_ev = ctx.Event(), ctx.Event(), ctx.Event()
        reason = ctx.Array("c", 256, lock=False)
        fd, crash_path = tempfile.mkstemp(prefix="chongming-crash-", suffix=".txt")
        os.close(fd)
        process = ctx.Process(  # type: ignore[attr-defined]
            target=_child_main,
            args=(
                child_conn,
                stop_ev,
                pause_ev,
                wake_ev,
                reason,
                payload,
                list(sys.path),
                os.getcwd(),
                crash_path,
            ),
            name=f"chongming-{request.name}-{request.task_id}-{request.attempt}",
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(crash_path)
            raise
        child_conn.close()
        handle = ProcessHandle(
            process,
            parent_conn,
            stop_ev,
            pause_ev,
            wake_ev,
            reason,
            reporter,
            self.terminate_grace,
            crash_path,
        )
        self._handles.add(handle)
        handle._reader.start()
        return handle

    def shutdown(self) -> None:
        """Kill what still runs (the controller is closing)."""
        for h in list(self._handles):
            if h.process.is_alive():
                h.killed = True
                h.process.terminate()
        for h in list(self._handles):
            h.process.join(self.terminate_grace)
            if h.process.is_alive():
                h.process.kill()
