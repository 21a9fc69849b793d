"""DaskExecutor: attempts run on a dask.distributed cluster; the kernel keeps control.

``DaskExecutor()`` starts (on first launch) a LocalCluster sized for this machine: two
worker processes with one thread each, no dashboard, and ``allowed-failures`` 0 so a
worker that dies under a task ends that attempt instead of running it again elsewhere.
``DaskExecutor("tcp://host:8786")`` or ``DaskExecutor(client)`` uses an existing cluster
(chongming_nb must be importable on its workers; it is never closed by us).

Channels, all through the scheduler with distributed's own primitives:

* **control** (controller -> workers): one ``distributed.Variable`` per executor holding
  ``{attempt key: (stop, reason, pause, ack_seq, ack)}`` for the attempts that have
  something to say. On each worker one agent thread polls it every ``poll_interval``
  (only while that worker runs our attempts) and copies it into each attempt's local
  CancellationToken, so ``ctx.checkpoint()`` stays one attribute check.
* **reports** (workers -> controller): one ``distributed.Queue`` per executor. The agent
  batches progress (throttled), log lines, emits and heartbeats (sampled from the token's
  beat counter, and sent while paused) into one ``put`` per interval; a parent thread
  drains it and calls the Reporter. A short task sends nothing through it at all: what is
  still unsent when it ends travels back with its result.
* **result**: the dask future. The parent waits until every report sent before the end
  has been delivered, so ``finished`` is always the last word.

Pause: a checkpoint that sees the pause asks the controller (a "pause" report) and waits
for the answer in the control Variable. Forced stop (``on_stop_timeout``): the future is
cancelled and the worker process that runs it is killed (its nanny starts a fresh one):
verdict "killed", recorded STOPPED. When that is not possible (no nanny, a worker inside
this very process, other work on that worker, unknown worker) the verdict is "abandoned"
and the attempt is recorded LOST: it may still be running.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import secrets
import threading
import time
from dataclasses import replace
from typing import Any

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors._channel import (
    HEARTBEAT_INTERVAL,
    ChannelReporter,
    deliver,
    outcome_from_wire,
    outcome_to_wire,
    portable_upstream,
)
from chongming_nb.runtime.executors.base import (
    ExecutionRequest,
    Outcome,
    Reporter,
    StopVerdict,
    run_attempt,
)

#: How often an agent polls the control Variable and flushes reports (seconds).
POLL_INTERVAL = 0.05
#: How long the parent waits for reports still in flight when a result arrives.
REPORT_GRACE = 5.0
#: An agent with nothing to do for this long ends its thread (seconds).
AGENT_IDLE_EXIT = 60.0
_NO_CONTROL = (False, None, False, 0, False)


def _require_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - the extra is installed in our venv
        raise ConfigurationError(
            "the dask executor needs dask.distributed: pip install 'chongming-nb[dask]'"
        ) from exc
    return distributed


# ---------------------------------------------------------------------------------
# Worker side


class _Slot:
    """One attempt running on this worker."""

    __slots__ = (
        "ack",
        "ack_event",
        "ack_seen",
        "beat_at",
        "beats",
        "key",
        "pending",
        "sent",
        "token",
    )

    def __init__(self, key: str, token: CancellationToken) -> None:
        self.key = key
        self.token = token
        self.pending: list[tuple[Any, ...]] = []
        self.sent = 0
        self.ack_seen = 0
        self.ack = False
        self.ack_event = threading.Event()
        self.beats = token.beats
        self.beat_at = time.monotonic()


class _Agent:
    """Per worker process and executor: polls control, flushes reports, samples beats."""

    def __init__(self, exec_id: str, client: Any, interval: float) -> None:
        distributed = _require_distributed()
        self.exec_id = exec_id
        self.interval = interval
        self.queue = distributed.Queue(f"{exec_id}-reports", client=client)
        self.control = distributed.Variable(f"{exec_id}-control", client=client)
        self.lock = threading.Lock()
        self.slots: dict[str, _Slot] = {}
        self.wake = threading.Event()
        self.thread = threading.Thread(
            target=self._loop, name=f"chongming-dask-agent-{exec_id}", daemon=True
        )
        self.thread.start()

    def add(self, slot: _Slot) -> None:  # under _agents_lock (see _attach)
        with self.lock:
            self.slots[slot.key] = slot
        self.wake.set()

    def remove(self, slot: _Slot) -> tuple[int, list[tuple[Any, ...]]]:
        """Forget the attempt; return how many reports were sent and those not yet sent."""
        with self.lock:
            self.slots.pop(slot.key, None)
            tail, slot.pending = slot.pending, []
            return slot.sent, tail

    def post(self, slot: _Slot, msg: tuple[Any, ...], urgent: bool = False) -> None:
        with self.lock:
            slot.pending.append(msg)
        if urgent:
            self.wake.set()

    def _loop(self) -> None:
        while True:
            with self.lock:
                busy = bool(self.slots)
            woken = self.wake.wait(self.interval if busy else AGENT_IDLE_EXIT)
            self.wake.clear()
            if not busy and not woken and self._retire():
                return
            try:
                self._tick()
            except Exception:  # the scheduler went away for a moment: try again later
                time.sleep(self.interval)

    def _retire(self) -> bool:
        """Idle for a while: leave (a later attempt starts a new agent)."""
        with _agents_lock, self.lock:
            if self.slots:
                return False
            if _agents.get(self.exec_id) is self:
                del _agents[self.exec_id]
            return True

    def _tick(self) -> None:
        now = time.monotonic()
        with self.lock:
            slots = list(self.slots.values())
        for s in slots:  # heartbeats: a changed beat counter, or paused (not stuck)
            if (s.token.beats != s.beats or s.token.paused) and (
                now - s.beat_at >= HEARTBEAT_INTERVAL
            ):
                s.beats = s.token.beats
                s.beat_at = now
                with self.lock:
                    s.pending.append(("beat", s.token.paused))
            s.token.arm_probe()  # after the read: checkpoints answer probes (heartbeat.py)
        batch: list[tuple[str, tuple[Any, ...]]] = []
        with self.lock:
            for s in self.slots.values():
                if s.pending:
                    batch.extend((s.key, m) for m in s.pending)
                    s.sent += len(s.pending)
                    s.pending = []
        if batch:
            self.queue.put(batch)
        if slots:
            control = self.control.get(timeout=10) or {}
            for s in slots:
                self._apply(s, control.get(s.key, _NO_CONTROL))

    @staticmethod
    def _apply(s: _Slot, state: tuple[Any, ...]) -> None:
        stop, reason, pause, ack_seq, ack = state
        tok = s.token
        if stop:
            if not tok.stop_requested:
                tok.request_stop(reason)
            s.ack_event.set()
        elif pause:
            if not tok.pause_requested:
                tok.request_pause()
        elif tok.pause_requested:
            tok.resume()
        if ack_seq > s.ack_seen:
            s.ack_seen = ack_seq
            s.ack = bool(ack)
            s.ack_event.set()


_agents: dict[str, _Agent] = {}
_agents_lock = threading.Lock()


def _attach(exec_id: str, interval: float, slot: _Slot) -> _Agent:
    """The agent of this worker process for ``exec_id`` (started if needed), with
    ``slot`` registered; atomic with respect to an idle agent retiring."""
    with _agents_lock:
        a = _agents.get(exec_id)
        if a is None:
            from distributed import get_client

            a = _agents[exec_id] = _Agent(exec_id, get_client(), interval)
        a.add(slot)
        return a


class _WorkerReporter(ChannelReporter):
    def __init__(self, agent: _Agent, slot: _Slot, request: ExecutionRequest) -> None:
        super().__init__(lambda m: agent.post(slot, m), request)
        self._agent = agent
        self._slot = slot
        self._seq = 0

    def pause_reached(self) -> bool:
        self.flush_progress()
        self._seq += 1
        seq = self._seq
        slot = self._slot
        slot.ack_event.clear()
        self._agent.post(slot, ("pause", seq), urgent=True)
        while slot.ack_seen < seq:
            if slot.token.stop_requested:
                return False
            slot.ack_event.wait(0.1)
            slot.ack_event.clear()
        return slot.ack


def run_on_worker(exec_id: str, key: str, request: ExecutionRequest, interval: float) -> Any:
    """What the dask task actually runs: the attempt, reported back to the controller.
    Never raises: the outcome travels as data."""
    from distributed import get_worker

    token = CancellationToken()
    slot = _Slot(key, token)
    agent = _attach(exec_id, interval, slot)
    reporter = _WorkerReporter(agent, slot, request)
    reporter.pid = os.getpid()
    with contextlib.suppress(ValueError):
        reporter.where = get_worker().address
    try:
        outcome = run_attempt(request, token, reporter)
    finally:
        reporter.flush_progress()
        sent, tail = agent.remove(slot)
    return {"outcome": outcome_to_wire(outcome, pickle.dumps), "sent": sent, "tail": tail}


def _cloudpickle_dumps(obj: Any) -> bytes:
    """What dask uses for functions and objects that plain pickle refuses."""
    import cloudpickle  # type: ignore[import-untyped]

    data: bytes = cloudpickle.dumps(obj)
    return data


async def _kill_this_process() -> None:  # runs on the worker chosen for a forced stop
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------------
# Controller side


class DaskHandle:
    """Control over one attempt running on a dask worker."""

    def __init__(self, executor: DaskExecutor, key: str, reporter: Reporter) -> None:
        self.token = CancellationToken()  # the parent's view: beats and paused
        self.key = key
        self.future: Any = None
        self.worker: str | None = None
        self.worker_pid: int | None = None
        self._ex = executor
        self._reporter = reporter
        self.state: tuple[Any, ...] = _NO_CONTROL
        self.received = 0
        self.expected: int | None = None
        self.result: dict[str, Any] | None = None
        self.done = threading.Event()
        self.killed = False
        self.done_at: float | None = None

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    @property
    def pid(self) -> int | None:
        return None  # the worker may be on another machine: its pid would mislead

    @property
    def supports_pause(self) -> bool:
        return True

    def _set(self, **kw: Any) -> None:
        # controller threads (stop, pause, resume) and the drainer (pause answers) both
        # write: one read-modify-write at a time
        with self._ex._lock:
            stop, reason, pause, ack_seq, ack = self.state
            v = {"stop": stop, "reason": reason, "pause": pause, "ack_seq": ack_seq, "ack": ack}
            v.update(kw)
            self.state = (v["stop"], v["reason"], v["pause"], v["ack_seq"], v["ack"])
            self._ex._publish(self)

    def request_stop(self, reason: str | None = None) -> None:
        with self._ex._lock:
            if self.state[0]:
                return
            self.token.request_stop(reason)
            self._set(stop=True, reason=reason)

    def request_pause(self) -> None:
        self._set(pause=True)

    def resume(self) -> None:
        self._set(pause=False)

    def on_stop_timeout(self) -> StopVerdict:
        if self.done.is_set():
            return "gone"
        verdict = self._ex._force_stop(self)
        if verdict == "killed":
            self.killed = True
            self.done.set()
        return verdict

    def join(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)


class DaskExecutor:
    """Runs attempts on dask.distributed workers. See the module docstring."""

    name = "dask"

    def __init__(
        self,
        client_or_address: Any = None,
        *,
        n_workers: int = 2,
        threads_per_worker: int = 1,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        if (
            client_or_address is not None
            and not isinstance(client_or_address, str)
            and not callable(getattr(client_or_address, "submit", None))
        ):
            raise ConfigurationError(
                "DaskExecutor takes None, a scheduler address or a distributed.Client, "
                f"got {client_or_address!r}"
            )
        if not isinstance(n_workers, int) or n_workers < 1:
            raise ConfigurationError(f"n_workers must be an int >= 1, got {n_workers!r}")
        if not isinstance(threads_per_worker, int) or threads_per_worker < 1:
            raise ConfigurationError(
                f"threads_per_worker must be an int >= 1, got {threads_per_worker!r}"
            )
        if not isinstance(poll_interval, int | float) or not 0 < poll_interval <= 5:
            raise ConfigurationError(f"poll_interval must be in (0, 5] s, got {poll_interval!r}")
        self._target = client_or_address
        self._n_workers = n_workers
        self._threads = threads_per_worker
        self.poll_interval = float(poll_interval)
        self.exec_id = f"chongming-{secrets.token_hex(6)}"
        self.client: Any = None
        self.cluster: Any = None
        self._owns_client = False
        self._lock = threading.RLock()
        self._handles: dict[str, DaskHandle] = {}
        self._control: dict[str, tuple[Any, ...]] = {}
        self._control_dirty = False
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._queue: Any = None
        self._variable: Any = None
        self._seq = itertools.count(1)
        self._next_reports = 0.0

    # ------------------------------------------------------------------ setup

    def start(self) -> Any:
        """Connect (or start the LocalCluster) now rather than on first launch."""
        with self._lock:
            if self._closed:
                raise ConfigurationError("this DaskExecutor is shut down")
            if self.client is not None:
                return self.client
            distributed = _require_distributed()
            target = self._target
            if target is None:
                import dask

                with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                    self.cluster = distributed.LocalCluster(
                        n_workers=self._n_workers,
                        threads_per_worker=self._threads,
                        processes=True,
                        dashboard_address=None,
                    )
                self.client = distributed.Client(self.cluster, set_as_default=False)
                self._owns_client = True
            elif isinstance(target, str):
                self.client = distributed.Client(target, set_as_default=False)
                self._owns_client = True
            else:
                self.client = target
            self._variable = distributed.Variable(f"{self.exec_id}-control", client=self.client)
            self._variable.set({})
            self._queue = distributed.Queue(f"{self.exec_id}-reports", client=self.client)
            self._thread = threading.Thread(
                target=self._drain_loop, name=f"chongming-dask-{self.exec_id}", daemon=True
            )
            self._thread.start()
            return self.client

    def validate(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Submit-time check: dask must be able to serialise the task (cloudpickle)."""
        try:
            _cloudpickle_dumps((target, args, kwargs))
        except Exception as exc:
            raise ConfigurationError(
                f"the dask executor cannot serialise this task: {type(exc).__name__}: {exc}; "
                "make its arguments picklable or run it with executor='thread'"
            ) from exc

    # ----------------------------------------------------------------- launch

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> DaskHandle:
        client = self.start()
        upstream = portable_upstream(request.upstream, _cloudpickle_dumps)
        if upstream is not request.upstream:
            request = replace(request, upstream=upstream)
        key = f"chongming-{request.name}-{request.task_id}-{request.attempt}-{next(self._seq)}"
        handle = DaskHandle(self, key, reporter)
        with self._lock:
            self._handles[key] = handle
        fut = client.submit(
            run_on_worker,
            self.exec_id,
            key,
            request,
            self.poll_interval,
            key=key,
            pure=False,
            retries=0,
        )
        handle.future = fut
        fut.add_done_callback(lambda _f, h=handle: self._future_done(h))
        return handle

    def _future_done(self, handle: DaskHandle) -> None:
        handle.done_at = time.monotonic()
        self._wake.set()

    def _publish(self, handle: DaskHandle) -> None:
        with self._lock:
            if handle.key not in self._handles:
                return
            if handle.state == _NO_CONTROL:
                self._control.pop(handle.key, None)
            else:
                self._control[handle.key] = handle.state
            self._control_dirty = True
        self._wake.set()

    # ------------------------------------------------------------- the drainer

    def _drain_loop(self) -> None:
        while not self._closed:
            with self._lock:
                busy = bool(self._handles) or self._control_dirty
            self._wake.wait(self.poll_interval if busy else 1.0)
            self._wake.clear()
            try:
                self._drain_once()
            except Exception:
                if self._closed:
                    return
                time.sleep(self.poll_interval)

    def _drain_once(self) -> None:
        with self._lock:
            dirty, self._control_dirty = self._control_dirty, False
            control = dict(self._control) if dirty else None
            active = bool(self._handles)
        if control is not None:
            self._variable.set(control)
        with self._lock:  # one snapshot: fetched, then settled (a later end waits a round)
            done = [h for h in self._handles.values() if h.done_at is not None]
        self._fetch_results(done)
        now = time.monotonic()
        # the report queue is read once per interval while attempts run, and at once
        # when a finished attempt still owes reports; a result alone needs no read
        owed = any(h.result is not None and h.received < h.result["sent"] for h in done)
        if active and (now >= self._next_reports or owed):
            self._next_reports = now + self.poll_interval
            batch = self._queue.get(batch=True)
            for items in batch:
                for key, msg in items:
                    h = self._handles.get(key)
                    if h is not None and not h.killed:
                        self._deliver(h, msg)
                        h.received += 1
        self._settle_done(done)

    def _fetch_results(self, done: list[DaskHandle]) -> None:
        """Bring back the results of the attempts whose futures finished (one gather)."""
        fetch = [h for h in done if h.result is None and h.future.status == "finished"]
        if fetch:
            results = self.client.gather([h.future for h in fetch], errors="skip")
            for h, r in zip(fetch, results, strict=False):
                h.result = r

    def _deliver(self, h: DaskHandle, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "pause":
            ok = False
            with contextlib.suppress(Exception):  # a failure there means "do not pause"
                ok = bool(h._reporter.pause_reached())
            if ok:
                h.token.paused = True
            h._set(ack_seq=msg[1], ack=ok)
            return
        if kind == "started":
            h.worker_pid = msg[1]
            h.worker = msg[2]
        with contextlib.suppress(Exception):  # the controller's problem must not stop us
            deliver(("started", None) if kind == "started" else msg, h._reporter, h.token)

    def _settle_done(self, done: list[DaskHandle]) -> None:
        if not done:
            return
        now = time.monotonic()
        for h in done:
            if h.killed:
                self._forget(h)
                continue
            status = h.future.status
            if status == "finished" and h.result is not None:
                sent = h.result["sent"]
                assert h.done_at is not None
                if h.received < sent and now - h.done_at < REPORT_GRACE:
                    continue  # reports still on their way: the result must come last
                for msg in h.result["tail"]:
                    self._deliver(h, msg)
                outcome = outcome_from_wire(h.result["outcome"])
            elif status == "cancelled":
                outcome = Outcome("cancelled", message="cancelled on the dask cluster")
            else:
                outcome = self._error_outcome(h)
            self._forget(h)
            h.token.paused = False
            h.done.set()
            h._reporter.finished(outcome)

    def _error_outcome(self, h: DaskHandle) -> Outcome:
        try:
            exc = h.future.exception(timeout=5)
        except Exception as e:  # the scheduler lost it
            exc = e
        name = type(exc).__name__
        if name == "KilledWorker":
            return Outcome(
                "crashed",
                message=f"the dask worker running the task died ({exc}); result unknown, "
                "partial side effects possible",
                exception_type="KilledWorker",
            )
        return Outcome(
            "failed",
            exception=exc if isinstance(exc, BaseException) else None,
            message=f"the dask cluster could not run the task: {name}: {exc}",
            exception_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
        )

    def _forget(self, h: DaskHandle) -> None:
        with self._lock:
            self._handles.pop(h.key, None)
            if self._control.pop(h.key, None) is not None:
                self._control_dirty = True
        h.future = None if h.done.is_set() else h.future

    # -------------------------------------------------------------- forced stop

    def _force_stop(self, h: DaskHandle) -> StopVerdict:
        """Kill the worker process running ``h`` (its nanny restarts it) or admit we
        cannot. Called by the controller once the cooperative window has run out."""
        client = self.client
        try:
            processing = client.processing()
            addr = h.worker or next((w for w, ks in processing.items() if h.key in ks), None)
            if addr is None:
                return "abandoned"
            info = client.scheduler_info()["workers"].get(addr)
            if info is None:
                return "abandoned"
            others = [k for k in processing.get(addr, ()) if k != h.key]
            pid = h.worker_pid or info.get("pid")
            if not info.get("nanny") or others or pid == os.getpid():
                return "abandoned"
            client.cancel(h.future)
            client.run(_kill_this_process, workers=[addr], wait=False)
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                if addr not in client.scheduler_info()["workers"]:
                    return "killed"
                time.sleep(0.02)
            return "abandoned"
        except Exception:
            return "abandoned"

    # --------------------------------------------------------------- shutdown

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            handles = list(self._handles.values())
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.client is None:
            return
        for h in handles:
            with contextlib.suppress(Exception):
                self.client.cancel(h.future)
        with contextlib.suppress(Exception):
            self._variable.delete()
        if self._owns_client:
            with contextlib.suppress(Exception):
                self.client.close()
            if self.cluster is not None:
                with contextlib.suppress(Exception):
                    self.cluster.close()


__all__ = ["DaskExecutor", "DaskHandle", "run_on_worker"]
