"""The child side of the process executor: one process that runs attempts one after
another until it is told to exit, dies, or an attempt leaves it unfit for reuse.

Protocol (parent -> child, ``conn.send``): ``("run", payload, sys_path, cwd)`` starts an
attempt (``payload`` is the pickled ExecutionRequest, unpickled here so that a task that
cannot load fails as a task); ``("ack", seq, ok)`` answers a pause question and
``("woke", seq, left)`` ends a ``ctx.sleep``; ``("exit",)`` ends the process. Child ->
parent (``send_bytes`` of pickled tuples, one lock: the task thread and the mirror thread
both write): started, progress, beat, log, emit, pause, sleep, resumed, and last
``("finished", wire, reusable, module_files)``.

Invariants:

* Between attempts only the main thread runs and nothing is written to the pipe: the
  mirror thread is joined before "finished" is sent, so the parent's reader for the next
  attempt never sees a message of the previous one.
* The stop/pause/wake Events and the reason buffer belong to the process, not to one
  attempt: the parent clears them before it sends the next "run".
* ``reusable`` is False when the attempt left a thread running (it would go on writing
  into later attempts' logs, or keep a non-daemon process alive): such a child sends its
  answer and exits, as a one-shot child always did.
"""

from __future__ import annotations

import contextlib
import faulthandler
import itertools
import multiprocessing.connection
import os
import pickle
import signal
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from chongming_nb.core.errors import TaskExecutionError
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors._channel import (
    HEARTBEAT_INTERVAL,
    THREAD_HINT,
    ChannelReporter,
    LineWriter,
    outcome_to_wire,
)
from chongming_nb.runtime.executors.base import ExecutionRequest, describe_failure, run_attempt

#: A module file modified less than this before an attempt started may have been loaded
#: in either version: the child reports it as stale (a fresh child will load it).
_MTIME_MARGIN_NS = 2_000_000_000
#: Directories of installed code: their modules are not watched for edits.
_INSTALLED = tuple(
    p for p in {sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib")} if p
)

Send = Callable[[tuple[Any, ...]], None]


class _ChildReporter(ChannelReporter):
    def __init__(
        self,
        send: Send,
        request: ExecutionRequest,
        conn: multiprocessing.connection.Connection,
        stop_ev: Any,
        pause_seq: Iterator[int],
    ) -> None:
        super().__init__(send, request)
        self._conn = conn
        self._stop_ev = stop_ev
        self._pause_seq = pause_seq
        self.pid = os.getpid()

    def pause_reached(self) -> bool:
        """Ask the controller whether to block now; the answer comes back on the pipe
        (only this thread reads it while the attempt runs). A stop while waiting wins.
        Sequence numbers are per process, so an answer meant for an earlier attempt can
        never be taken for this one."""
        self.flush_progress()
        seq = next(self._pause_seq)
        self._send(("pause", seq))
        while True:
            if self._conn.poll(0.05):
                msg = self._conn.recv()
                if msg[0] == "ack" and msg[1] == seq:
                    return bool(msg[2])
                continue  # a stale answer to an earlier question
            if self._stop_ev.is_set():
                return False

    def sleep(self, seconds: float, token: CancellationToken) -> float:
        """``ctx.sleep`` in the child: the controller frees the task's slot meanwhile
        (another task may start, in another child) and answers ``("woke", seq, left)``
        when the sleep ends: at its time, or at a pause once the task has a slot again.
        A stop ends it here at once. The mirror thread keeps sending heartbeats (a
        sleeping task is alive). Returns the seconds the controller says are left."""
        self.flush_progress()
        seq = next(self._pause_seq)
        self._send(("sleep", seq, seconds))
        token.sleeping = True
        try:
            while not self._stop_ev.is_set():
                if self._conn.poll(0.05):
                    msg = self._conn.recv()
                    if msg[0] == "woke" and msg[1] == seq:
                        return float(msg[2])
                    # a stale answer to an earlier question
            return seconds
        finally:
            token.sleeping = False


def _mirror(
    token: CancellationToken,
    reporter: ChannelReporter,
    done: threading.Event,
    send: Send,
    events: tuple[Any, Any, Any],
    reason: Any,
) -> None:
    """Copy the parent's stop/pause Events into the attempt's token; send heartbeats when
    the token's beat counter moved (or while paused: a paused task is not stuck) and
    flush throttled progress."""
    stop_ev, pause_ev, wake_ev = events
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
        if beats != last_beats or token.paused or token.sleeping:
            last_beats = beats
            try:
                send(("beat", token.paused))
            except OSError:
                return


def _load_failure(exc: BaseException) -> dict[str, Any]:
    message, trace, qualified = describe_failure(exc)
    return {
        "kind": "failed",
        "exception": TaskExecutionError(f"could not load the task: {message}"),
        "traceback": trace,
        "message": f"the child process could not load the task ({message}). {THREAD_HINT}",
        "exception_type": qualified,
    }


def _run_one(
    payload: bytes,
    send: Send,
    conn: multiprocessing.connection.Connection,
    events: tuple[Any, Any, Any],
    reason: Any,
    pause_seq: Iterator[int],
) -> dict[str, Any]:
    """One attempt, start to end; returns its outcome as wire data."""
    try:
        request: ExecutionRequest = pickle.loads(payload)
    except BaseException as exc:
        return _load_failure(exc)
    reporter = _ChildReporter(send, request, conn, events[0], pause_seq)
    # Threads the task starts print too: their lines go to the task's log as well.
    sys.stdout = LineWriter("stdout", reporter.log)
    sys.stderr = LineWriter("stderr", reporter.log)
    token = CancellationToken()
    done = threading.Event()
    mirror = threading.Thread(
        target=_mirror,
        args=(token, reporter, done, send, events, reason),
        name="chongming-mirror",
        daemon=True,
    )
    mirror.start()
    try:
        outcome = run_attempt(request, token, reporter)
    finally:
        done.set()
        events[2].set()
        mirror.join()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    reporter.flush_progress()
    return outcome_to_wire(outcome, pickle.dumps)


def _new_module_files(known: set[str], started_ns: int) -> list[tuple[str, int]]:
    """Source files of the modules imported since the last call (outside installed
    code), with their modification time; -1 when the file changed so close to the
    attempt's start that either version may have been loaded."""
    out: list[tuple[str, int]] = []
    for name in set(sys.modules) - known:
        known.add(name)
        path = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(path, str) or path.startswith(_INSTALLED):
            continue
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            continue
        out.append((path, -1 if mtime >= started_ns - _MTIME_MARGIN_NS else mtime))
    return out


def serve(
    conn: multiprocessing.connection.Connection,
    stop_ev: Any,
    pause_ev: Any,
    wake_ev: Any,
    reason: Any,
    crash_path: str,
) -> None:
    """Entry point of the child process."""
    # The parent controls this process (stop: flag, then terminate, then kill). SIGINT is
    # not for it: Kernel -> Interrupt and a kernel shutdown signal the kernel's whole
    # process group, and a child that took it would die mid-attempt with a
    # KeyboardInterrupt traceback printed under whatever cell runs.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a hard crash (segfault, abort) writes the Python stacks here for the parent
    with contextlib.suppress(OSError):
        crash_file = open(crash_path, "w")  # noqa: SIM115 - must stay open until exit
        faulthandler.enable(file=crash_file, all_threads=True)
    lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        data = pickle.dumps(msg)
        with lock:
            conn.send_bytes(data)

    events = (stop_ev, pause_ev, wake_ev)
    pause_seq = itertools.count(1)
    known = set(sys.modules)
    baseline = set(threading.enumerate())
    streams = sys.stdout, sys.stderr
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if msg[0] == "exit":
            return
        if msg[0] != "run":
            continue  # a late answer to a pause question of an attempt that ended
        _, payload, sys_path, cwd = msg
        started_ns = time.time_ns()
        sys.path[:] = sys_path
        with contextlib.suppress(OSError):
            os.chdir(cwd)
        try:
            wire = _run_one(payload, send, conn, events, reason, pause_seq)
        finally:
            sys.stdout, sys.stderr = streams
        reusable = set(threading.enumerate()) <= baseline
        try:
            send(("finished", wire, reusable, _new_module_files(known, started_ns)))
        except OSError:
            return
        if not reusable:
            return
