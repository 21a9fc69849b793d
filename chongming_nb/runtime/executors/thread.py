"""ThreadExecutor: each attempt on a daemon thread.

Daemon threads, because an uncooperative task must never block interpreter exit (so no
ThreadPoolExecutor, whose workers are joined at exit). Idle workers are reused; a worker
whose attempt was abandoned is never reused — it finishes (or not) on its own and exits.

Honesty rule: a thread cannot be killed. When the stop window runs out the attempt is
*abandoned*: the controller records LOST and ``running`` keeps saying True for as long
as the thread really runs.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time

from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors._local import TokenHandle
from chongming_nb.runtime.executors.base import (
    ExecutionRequest,
    Reporter,
    StopVerdict,
    run_attempt,
)

_IDLE_SECONDS = 30.0
#: How long ``shutdown`` waits in all for the idle workers to leave (they leave at once;
#: one finishing its last report may take a moment).
_SHUTDOWN_WAIT = 5.0
log = logging.getLogger("chongming_nb.executors")
_names = itertools.count(1)


class _Done:
    """A one-shot event on a bare lock (held until set): what ``threading.Event`` does
    for a handle, without building a Condition and two locks in Python per attempt."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        # (no contextlib.suppress: an object per task showed in profiles)
        try:  # noqa: SIM105
            self._lock.release()
        except RuntimeError:  # already set
            pass

    def is_set(self) -> bool:
        return not self._lock.locked()

    def wait(self, timeout: float | None = None) -> bool:
        if not self._lock.locked():
            return True
        if not self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        self._lock.release()  # let every other waiter through too
        return True


class ThreadHandle(TokenHandle):
    __slots__ = ("_done", "abandoned", "worker")

    def __init__(self, token: CancellationToken) -> None:
        super().__init__(token)
        self._done = _Done()
        self.abandoned = False
        self.worker: _Worker | None = None

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def on_stop_timeout(self) -> StopVerdict:
        if not self.running:
            return "gone"
        self.abandoned = True
        if self.worker is not None:
            self.worker.abandoned = True
        return "abandoned"

    def join(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)


class _Worker:
    def __init__(self, pool: ThreadExecutor) -> None:
        self.pool = pool
        self.jobs: queue.SimpleQueue[tuple[ThreadHandle, ExecutionRequest, Reporter] | None] = (
            queue.SimpleQueue()
        )
        self.abandoned = False
        self.thread = threading.Thread(
            target=self._loop, name=f"chongming-task-{next(_names)}", daemon=True
        )

    def _loop(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                if self.pool._retire(self):
                    return
                continue
            if job is None:
                return
            handle, request, reporter = job
            outcome = run_attempt(request, handle.token, reporter)
            handle._done.set()
            # Park *before* reporting: the controller launches the next queued task from
            # inside ``finished``, and the most recently parked worker (this one) takes
            # it, so a stream of short tasks stays on one thread instead of waking
            # another one per task. An abandoned worker never parks (abandonment needs
            # ``running``, which is False from ``_done.set()`` on, so it cannot happen
            # after this check).
            parked = not self.abandoned and self.pool._park(self)
            try:
                reporter.finished(outcome)
            except Exception:  # the controller's bug must not take the worker with it
                log.exception("reporting the end of %s failed", request.task_id)
            if not parked:
                return


class ThreadExecutor:
    """Runs attempts on reusable daemon threads. Concurrency limits live in the
    scheduler, not here: this executor never queues."""

    name = "thread"

    def __init__(self, max_idle: int = 8) -> None:
        self._idle: list[_Worker] = []
        self._max_idle = max_idle
        self._closed = False

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> ThreadHandle:
        handle = ThreadHandle(CancellationToken(armed=True))  # see Heartbeat
        try:
            worker = self._idle.pop()  # atomic: no lock on the hot path (see _park)
        except IndexError:
            worker = None
        if worker is None:
            worker = _Worker(self)
            worker.thread.start()
        handle.worker = worker
        worker.jobs.put((handle, request, reporter))
        return handle

    # The idle list is shared without a lock: ``append``, ``pop`` and ``remove`` on a
    # list are each atomic (under the GIL, and under a free-threaded build's per-object
    # lock). A lock here was the hot spot of short tasks: a thread preempted while
    # holding it made every other worker block on it, one thread switch per task.
    # Invariant: a worker is in ``_idle`` at most once, and only while its job queue
    # is empty and nobody has popped it; whoever pops it owns the right to send it a job.

    def _park(self, worker: _Worker) -> bool:
        if self._closed or len(self._idle) >= self._max_idle:
            return False  # (a racing park may overshoot max_idle by one: harmless)
        self._idle.append(worker)
        if self._closed:  # shutdown ran meanwhile and may have missed us: unless it
            return not self._retire(worker)  # popped us (None is coming), leave now
        return True

    def _retire(self, worker: _Worker) -> bool:
        try:
            self._idle.remove(worker)
        except ValueError:
            return False  # popped by a launch: a job is on its way
        return True

    def shutdown(self) -> None:
        """Tell the idle workers to leave, and wait (at most ``_SHUTDOWN_WAIT`` seconds in
        all) until they have: a closed controller leaves no thread of ours behind. A
        worker still running a task is not waited for (an uncooperative one may never
        end; it leaves when its task does)."""
        self._closed = True
        leaving: list[_Worker] = []
        while True:
            try:
                w = self._idle.pop()
            except IndexError:
                break
            w.jobs.put(None)
            leaving.append(w)
        deadline = time.monotonic() + _SHUTDOWN_WAIT
        me = threading.current_thread()
        for w in leaving:
            # (not a task's own worker closing its controller; not one never started)
            if w.thread is not me and w.thread.is_alive():
                w.thread.join(max(0.0, deadline - time.monotonic()))
