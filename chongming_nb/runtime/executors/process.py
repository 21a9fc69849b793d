"""ProcessExecutor: attempts run in (daemon) child processes, kept warm between attempts.

What it buys, and only it: a stop that is guaranteed to end the work (terminate, then
kill), CPU parallelism past the GIL, and crash isolation (a segfault takes down the child,
not the kernel). What it costs, by construction:

* ``target``, ``args`` and ``kwargs`` travel to the child with cloudpickle: what can be
  imported by name goes by reference, functions defined in a notebook cell, lambdas and
  closures go by value (with the globals they use). What cannot be pickled at all (an
  open file, a lock, a generator, a connection) is refused when the task is submitted and
  again at launch, with a ``ConfigurationError`` that names the function or the argument
  and suggests ``executor="thread"``.
* The child is a daemon process, so the task cannot start processes of its own.
* Stop and pause reach the child through ``multiprocessing.Event`` objects mirrored into
  the child's own CancellationToken by a small thread, so they land at the next
  checkpoint a few milliseconds later than with threads.

How it works (seed 001 §13.8): children come from a ``forkserver`` (``fork`` is unsafe
in a kernel full of threads). A child runs one attempt at a time and, when the attempt
ends cleanly, waits for the next one (``reuse=True``, the default): starting a child and
importing the task's module costs tens of milliseconds per attempt, a warm child a
fraction of one. For each attempt the child rebuilds a TaskContext around a fresh local
token; a mirror thread copies the stop/pause Events into it, samples the token's beat
counter and sends throttled heartbeats (also while paused: a paused task is not stuck),
and flushes throttled progress. Every message travels over one pipe guarded by a lock,
since two threads write. In the parent a reader thread per attempt drains the pipe
whether or not anyone waits, and calls the Reporter. Liveness is
``Process.is_alive()``, never pipe EOF.

A child is never reused after a forced stop (it is dead), a crash, an attempt that left
threads running, or when a module file it loaded was edited since (a new child imports
the new code, as a fresh process always did). Idle children are retired after
``idle_timeout`` seconds. Module-level state a task leaves behind is seen by later
attempts in the same child, as in any process pool; ``reuse=False`` gives every attempt
a fresh process.

Stop: the controller asks for a cooperative stop; if the grace window runs out it calls
``on_stop_timeout()``: terminate, wait ``terminate_grace``, kill, and report "killed" (a
known outcome: STOPPED, not LOST; ``running`` is False afterwards). A child that dies on
its own (exception in C, ``os.abort()``, a segfault) ends as ``Outcome("crashed")`` with
its exit code; when it had already started, the message says the result is unknown and
partial side effects are possible.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import weakref
from dataclasses import replace
from typing import Any

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors._channel import (
    HEARTBEAT_INTERVAL,
    PROGRESS_INTERVAL,
    THREAD_HINT,
    ChannelReporter,
    LineWriter,
    UnavailableUpstream,
    check_process_target,
    deliver,
    dumps,
    outcome_from_wire,
    outcome_to_wire,
    portable_upstream,
    resolve_upstream,
    safe_payload,
)
from chongming_nb.runtime.executors._process_pool import ChildPool, _Child
from chongming_nb.runtime.executors.base import (
    ExecutionRequest,
    Outcome,
    Reporter,
    StopVerdict,
)

log = logging.getLogger("chongming_nb.executors")

#: Idle warm children are retired after this many seconds without an attempt.
IDLE_TIMEOUT = 60.0


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return ""
    try:
        return f", {signal.Signals(-code).name}"
    except ValueError:
        return ""


class ProcessHandle:
    """Control over one attempt running in a child process.

    Invariant: once the attempt's child went back to the pool (``_released``), nothing
    this handle does reaches the child any more: stop, pause and resume are dropped and
    ``on_stop_timeout`` answers "gone". ``_released`` and ``killed`` are decided under
    ``_lock``, so a forced stop and a clean end never both win.
    """

    def __init__(
        self,
        child: _Child,
        pool: ChildPool | None,
        reporter: Reporter,
        terminate_grace: float,
    ) -> None:
        self.token = CancellationToken()  # the parent's view: beats and paused, for heartbeats
        self.child = child
        self.process = child.process
        self._pool = pool
        self._conn = child.conn
        self._reporter = reporter
        self._grace = terminate_grace
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._released = False
        self.killed = False
        self.started = False
        self.finished = threading.Event()
        self.exit_code: int | None = None
        self._sleeper: threading.Thread | None = None  # waits out a ctx.sleep
        self._reader = threading.Thread(
            target=self._read_loop, name=f"chongming-proc-reader-{self.pid}", daemon=True
        )

    # -------------------------------------------------------------- protocol

    @property
    def running(self) -> bool:
        return not self._released and self.process.is_alive()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def supports_pause(self) -> bool:
        return True

    def request_stop(self, reason: str | None = None) -> None:
        self.token.request_stop(reason)
        c = self.child
        with self._lock:
            if self._released:
                return
            if reason and not c.stop_ev.is_set():
                c.reason.value = reason.encode("utf-8", "replace")[: len(c.reason) - 1]
            c.stop_ev.set()
            c.wake_ev.set()

    def request_pause(self) -> None:
        self.token.request_pause()  # ends a ctx.sleep the parent waits out for the child
        with self._lock:
            if not self._released:
                self.child.pause_ev.set()
                self.child.wake_ev.set()

    def resume(self) -> None:
        self.token.resume()
        with self._lock:
            if not self._released:
                self.child.pause_ev.clear()
                self.child.wake_ev.set()

    def on_stop_timeout(self) -> StopVerdict:
        """The cooperative window ran out: terminate, wait, kill. A known outcome."""
        with self._lock:
            if self._released or self.finished.is_set() or not self.process.is_alive():
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

    def _sleep(self, seq: int, seconds: float) -> None:
        """The child's ``ctx.sleep``, waited out here on the parent's token: the
        controller's Reporter frees the slot and wakes it by its timer, a stop or a
        pause (taking a slot again unless stopped); then the child hears "woke"."""
        left = 0.0
        try:
            sleep = getattr(self._reporter, "sleep", None)
            if sleep is not None:
                left = float(sleep(seconds, self.token))
            else:  # a Reporter without a controller behind it: just wait
                self.token.sleep(seconds)
        except Exception:
            log.exception("ctx.sleep of the task in process %s failed", self.pid)
        finally:
            self._answer(("woke", seq, left))

    def _read_loop(self) -> None:
        end: tuple[Any, ...] | None = None
        reporter = self._reporter
        conn = self._conn
        try:
            while end is None:
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
                    end = msg
                elif kind == "sleep":
                    self._sleeper = threading.Thread(
                        target=self._sleep,
                        args=(msg[1], float(msg[2])),
                        name=f"chongming-proc-sleep-{self.pid}",
                        daemon=True,
                    )
                    self._sleeper.start()
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
            sleeper = self._sleeper
            if sleeper is not None and sleeper.is_alive():
                # the child is gone mid-sleep (killed, crashed): end the wait, which
                # then takes no slot, before the controller hears of the end
                self.token.request_stop("the attempt ended")
                sleeper.join(5.0)
            outcome = self._end(end)
            self.token.paused = False
            self.finished.set()
            reporter.finished(outcome)

    def _end(self, end: tuple[Any, ...] | None) -> Outcome:
        """How the attempt ended; the child goes back to the pool (before the controller
        hears of the end, so its next launch can take it) or is disposed of."""
        child = self.child
        reusable = end is not None and bool(end[2]) and self._pool is not None
        with self._lock:
            if reusable and not self.killed:
                self._released = True
        if self._released:
            assert end is not None and self._pool is not None
            child.files.update(end[3])
            self._pool.release(child)
            return outcome_from_wire(end[1])
        try:
            return self._settle(None if end is None else end[1])
        finally:
            child.dispose()

    def _settle(self, wire: dict[str, Any] | None) -> Outcome:
        p = self.process
        if wire is not None and not self.killed:
            # a child that will not be reused exits after its answer
            with contextlib.suppress(OSError):
                self._conn.send(("exit",))
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
        try:
            with open(self.child.crash_path, encoding="utf-8", errors="replace") as f:
                text = f.read().strip()
        except OSError:
            return None
        return text or None


def _default_method() -> str:
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class ProcessExecutor:
    """Runs attempts in daemon child processes (hard stop, no GIL, crash isolation).

    ``start_method``: "forkserver" (default where available) or "spawn". ``fork`` is
    refused: the kernel runs threads, and forking a process with threads can deadlock the
    child. ``terminate_grace``: after SIGTERM, how long to wait before SIGKILL.
    ``reuse``: keep a child warm for the next attempt (default) or start one per attempt.
    ``idle_timeout``: seconds an idle warm child is kept; ``max_idle``: how many are kept
    (default: the number of CPUs, at least 2).
    """

    name = "process"

    def __init__(
        self,
        start_method: str | None = None,
        terminate_grace: float = 1.0,
        *,
        reuse: bool = True,
        idle_timeout: float = IDLE_TIMEOUT,
        max_idle: int | None = None,
    ) -> None:
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
        if not isinstance(reuse, bool):
            raise ConfigurationError(f"reuse must be True or False, got {reuse!r}")
        if not isinstance(idle_timeout, int | float) or idle_timeout <= 0:
            raise ConfigurationError(f"idle_timeout must be > 0 seconds, got {idle_timeout!r}")
        if max_idle is None:
            max_idle = max(2, os.cpu_count() or 1)
        if not isinstance(max_idle, int) or isinstance(max_idle, bool) or max_idle < 1:
            raise ConfigurationError(f"max_idle must be an int >= 1, got {max_idle!r}")
        self.start_method = method
        self.terminate_grace = float(terminate_grace)
        self.reuse = reuse
        self.pool = ChildPool(method, float(idle_timeout), max_idle, self.terminate_grace)
        self._handles: weakref.WeakSet[ProcessHandle] = weakref.WeakSet()

    def validate(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Submit-time check: raise ConfigurationError unless a child can load this task."""
        check_process_target(target, args, kwargs)

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> ProcessHandle:
        check_process_target(request.target, request.args, request.kwargs)
        upstream = portable_upstream(request.upstream, dumps)
        if upstream is not request.upstream:
            request = replace(request, upstream=upstream)
        try:
            payload = dumps(request)
        except Exception as exc:  # something else in the request (a deadline subclass...)
            raise ConfigurationError(
                f"the process executor cannot send this task: {type(exc).__name__}: {exc}. "
                f"{THREAD_HINT}"
            ) from exc
        child = self.pool.acquire()
        handle = ProcessHandle(
            child, self.pool if self.reuse else None, reporter, self.terminate_grace
        )
        self._handles.add(handle)
        child.run(payload, list(sys.path), os.getcwd())
        handle._reader.start()
        return handle

    def shutdown(self) -> None:
        """Kill what still runs (the controller is closing) and retire idle children."""
        running = [h for h in list(self._handles) if h.running]
        for h in running:
            with h._lock:
                h.killed = True
            h.process.terminate()
        for h in running:
            h.process.join(self.terminate_grace)
            if h.process.is_alive():
                h.process.kill()
        self.pool.shutdown()


__all__ = [
    "HEARTBEAT_INTERVAL",
    "PROGRESS_INTERVAL",
    "ChannelReporter",
    "LineWriter",
    "ProcessExecutor",
    "ProcessHandle",
    "UnavailableUpstream",
    "check_process_target",
    "deliver",
    "outcome_from_wire",
    "outcome_to_wire",
    "portable_upstream",
    "resolve_upstream",
    "safe_payload",
]
