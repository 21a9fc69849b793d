"""DaskExecutor: attempts run on a dask.distributed cluster; the kernel keeps control.

``DaskExecutor()`` starts (on first launch) a LocalCluster sized for this machine: two
worker processes with one thread each, no dashboard, and ``allowed-failures`` 0 so a
worker that dies under a task ends that attempt instead of running it again elsewhere.
``DaskExecutor("tcp://host:8786")`` or ``DaskExecutor(client)`` uses an existing cluster
(chongming_nb must be importable on its workers; it is never closed by us).

Channels, all pushed through the scheduler's structured events (``log_event`` /
``subscribe_topic``): nothing polls the scheduler while attempts run.

* **control** (controller -> workers): the controller's state for the attempts that have
  something to say, ``{attempt key: (stop, reason, pause, ack_seq, ack)}`` with a version,
  is published on ``CONTROL_TOPIC`` when it changes. Every worker process subscribes
  once; its handler copies the state into the local CancellationToken of each attempt it
  runs, so ``ctx.checkpoint()`` stays one attribute check. The same state is kept in one
  ``distributed.Variable`` per executor, which a worker's agent reads when it starts and
  then once per ``CONTROL_REFRESH`` while it runs attempts: a push that went missing
  (the subscription was still on its way, a reconnect) is late, never lost.
* **reports** (workers -> controller): progress (throttled), log lines, emits and
  heartbeats of the attempts running in one worker process are batched by that process's
  agent thread (one event per ``poll_interval`` at most, while there is something to
  say) and published on ``REPORT_TOPIC``; the controller's client is subscribed, and a
  kernel-side thread hands them to the Reporter. A short task sends nothing until it ends.
* **result**: when an attempt ends, what it has not reported yet and its outcome leave
  the worker as one last event (a value of ``INLINE_RESULT_BYTES`` at most, pickled; a
  larger one is fetched from the dask future). A worker's events reach the kernel in the
  order they were sent, so ``finished`` is always the last word. The attempt is settled
  once its dask future has finished too (then the scheduler knows the worker is free,
  and the next launch goes there), without a gather round trip. The future is also the
  backstop: a worker that dies or a task dask cannot run ends the attempt through it.

Pause: a checkpoint that sees the pause asks the controller (a "pause" report) and waits
for the answer in the control state. Forced stop (``on_stop_timeout``): the future is
cancelled and the worker process that runs it is killed (its nanny starts a fresh one):
verdict "killed", recorded STOPPED. When that is not possible (no nanny, a worker inside
this very process, other work on that worker, unknown worker) the verdict is "abandoned"
and the attempt is recorded LOST: it may still be running.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import logging
import os
import pickle
import secrets
import threading
import time
import weakref
from dataclasses import replace
from typing import Any

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.runtime.cancellation import CancellationToken
from chongming_nb.runtime.executors._channel import (
    HEARTBEAT_INTERVAL,
    THREAD_HINT,
    ChannelReporter,
    deliver,
    describe_unpicklable,
    dumps,
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

log = logging.getLogger("chongming_nb.executors")

#: How often an agent flushes reports and samples heartbeats (seconds).
POLL_INTERVAL = 0.05
#: While it runs attempts, an agent also reads the control Variable this often, in case
#: a pushed change did not reach it (seconds).
CONTROL_REFRESH = 1.0
#: A result whose pickle is at most this big travels with the attempt's last report
#: (larger ones are fetched from the dask future). The scheduler keeps the last events
#: of a topic (``distributed.admin.low-level-log-length``, 1000 by default).
INLINE_RESULT_BYTES = 16 * 1024
#: How long the parent waits for an attempt's last report once its dask future finished.
REPORT_GRACE = 5.0
#: An agent with nothing to do for this long ends its thread (seconds).
AGENT_IDLE_EXIT = 60.0
#: The scheduler topics, one each for every executor on the cluster (events name their
#: executor): the scheduler keeps a bounded history per topic, and topics are never
#: deleted, so a topic per executor would leave one behind for each.
REPORT_TOPIC = "chongming-nb-reports"
CONTROL_TOPIC = "chongming-nb-control"
_NO_CONTROL = (False, None, False, 0, False)


def _require_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - the extra is installed in our venv
        raise ConfigurationError(
            "the dask executor needs dask.distributed: pip install 'chongming-nb[dask]'"
        ) from exc
    return distributed


def _dumps_batch(batch: list[tuple[str, tuple[Any, ...]]]) -> bytes:
    """A batch of reports as bytes (events must be msgpack-able); a message that does not
    pickle (it should always: the reporter checks) is dropped rather than the batch."""
    try:
        return pickle.dumps(batch)
    except Exception:
        ok = []
        for item in batch:
            with contextlib.suppress(Exception):
                pickle.dumps(item)
                ok.append(item)
        return pickle.dumps(ok)


# ---------------------------------------------------------------------------------
# Worker side


class _Slot:
    """One attempt running on this worker."""

    __slots__ = ("ack", "ack_event", "ack_seen", "beat_at", "beats", "key", "pending", "token")

    def __init__(self, key: str, token: CancellationToken) -> None:
        self.key = key
        self.token = token
        self.pending: list[tuple[Any, ...]] = []
        self.ack_seen = 0
        self.ack = False
        self.ack_event = threading.Event()
        self.beats = token.beats
        self.beat_at = time.monotonic()


def _apply(s: _Slot, state: tuple[Any, ...]) -> None:
    """Copy the controller's word for one attempt into its token (idempotent)."""
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


class _Agent:
    """Per worker and executor: sends reports, samples beats, keeps the control state."""

    def __init__(self, exec_id: str, worker: Any, client: Any, interval: float) -> None:
        distributed = _require_distributed()
        self.exec_id = exec_id
        self.ident = (exec_id, id(worker))
        self.interval = interval
        self.worker = worker
        self.control = distributed.Variable(f"{exec_id}-control", client=client)
        self.lock = threading.Lock()
        self.slots: dict[str, _Slot] = {}
        self.version = -1
        self.state: dict[str, tuple[Any, ...]] = {}
        self.refresh_at = 0.0  # the first tick reads the Variable: pushes may predate us
        self.wake = threading.Event()
        self.thread = threading.Thread(
            target=self._loop, name=f"chongming-dask-agent-{exec_id}", daemon=True
        )
        self.thread.start()

    def add(self, slot: _Slot) -> None:  # under _agents_lock (see _attach)
        with self.lock:
            self.slots[slot.key] = slot
            _apply(slot, self.state.get(slot.key, _NO_CONTROL))
        self.wake.set()

    def take(self, version: int, state: dict[str, tuple[Any, ...]]) -> None:
        """A control state, pushed or read: applied unless a newer one was seen."""
        with self.lock:
            if version <= self.version:
                return
            self.version, self.state = version, state
            for s in self.slots.values():
                _apply(s, state.get(s.key, _NO_CONTROL))

    def post(self, slot: _Slot, msg: tuple[Any, ...], urgent: bool = False) -> None:
        with self.lock:
            slot.pending.append(msg)
        if urgent:
            self.wake.set()

    def _send(self, batch: list[tuple[str, tuple[Any, ...]]], last_of: str | None = None) -> None:
        # under self.lock: the order events are handed to the worker is the order they
        # arrive in (one batched stream to the scheduler, one to the controller)
        self.worker.log_event(REPORT_TOPIC, [self.exec_id, _dumps_batch(batch), last_of])

    def finish(self, slot: _Slot, wire: dict[str, Any], inline: bool) -> dict[str, Any]:
        """Forget the attempt and send its last event: what it has not reported yet,
        then its outcome (``None`` when too big: fetched from the future instead)."""
        with self.lock:
            self.slots.pop(slot.key, None)
            tail, slot.pending = slot.pending, []
            end = ("end", wire if inline else None)
            try:
                self._send([(slot.key, m) for m in tail] + [(slot.key, end)], slot.key)
                reported = True
            except Exception:  # the worker is closing: the future carries it all
                reported = False
        return {"outcome": wire, "tail": tail, "reported": reported}

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
            if _agents.get(self.ident) is self:
                del _agents[self.ident]
            return True

    def _tick(self) -> None:
        now = time.monotonic()
        with self.lock:
            batch: list[tuple[str, tuple[Any, ...]]] = []
            for s in self.slots.values():
                tok = s.token
                # heartbeats: a changed beat counter, or paused or asleep (not stuck)
                alive = tok.beats != s.beats or tok.paused or tok.sleeping
                if alive and now - s.beat_at >= HEARTBEAT_INTERVAL:
                    s.beats = tok.beats
                    s.beat_at = now
                    s.pending.append(("beat", tok.paused))
                tok.arm_probe()  # after the read: checkpoints answer probes (heartbeat.py)
                if s.pending:
                    batch.extend((s.key, m) for m in s.pending)
                    s.pending = []
            if batch:
                self._send(batch)
            busy = bool(self.slots)
        if busy and now >= self.refresh_at:
            self.refresh_at = now + CONTROL_REFRESH
            got = self.control.get(timeout=10)
            if got:
                self.take(*got)


_agents: dict[tuple[str, int], _Agent] = {}
_agents_lock = threading.Lock()
#: id(client) -> the worker clients of this process subscribed to CONTROL_TOPIC.
_subscribed: dict[int, weakref.ref[Any]] = {}


def _on_control(event: tuple[float, Any]) -> None:
    """On a worker's event loop: a control state pushed by an executor."""
    try:
        exec_id, version, blob = event[1]
    except (TypeError, ValueError):
        return
    with _agents_lock:
        agents = [a for a in _agents.values() if a.exec_id == exec_id]
    if agents:
        state = pickle.loads(blob)
        for a in agents:
            a.take(version, state)


def _attach(exec_id: str, interval: float, slot: _Slot) -> _Agent:
    """The agent of this worker for ``exec_id`` (started if needed), with ``slot``
    registered; atomic with respect to an idle agent retiring."""
    from distributed import get_worker

    worker = get_worker()
    ident = (exec_id, id(worker))
    with _agents_lock:
        a = _agents.get(ident)
        if a is not None:
            a.add(slot)
            return a
    # not under _agents_lock: making the worker's client may need its event loop, which
    # takes that lock in _on_control
    from distributed import get_client

    client: Any = get_client()
    with _agents_lock:
        ref = _subscribed.get(id(client))
        if ref is None or ref() is not client:
            client.subscribe_topic(CONTROL_TOPIC, _on_control)
            _subscribed[id(client)] = weakref.ref(client)
        a = _agents.get(ident)
        if a is None:
            a = _agents[ident] = _Agent(exec_id, worker, client, interval)
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

    def sleep(self, seconds: float, token: CancellationToken) -> float:
        """``ctx.sleep`` on a worker: the task secedes from the worker's thread pool (dask
        may run another task meanwhile), the controller frees its slot, and the
        controller's answer (at the wake time, or at a pause once the task has a slot
        again) ends the sleep; the task then rejoins the pool. A stop ends it at once."""
        distributed = _require_distributed()
        self.flush_progress()
        self._seq += 1
        seq = self._seq
        slot = self._slot
        slot.ack_event.clear()
        try:
            distributed.secede()
            seceded = True
        except Exception:  # not on a worker's thread pool: sleep holding the thread
            seceded = False
        self._agent.post(slot, ("sleep", seq, seconds), urgent=True)
        token.sleeping = True  # the agent's heartbeats go on: alive
        try:
            while slot.ack_seen < seq and not token.stop_requested:
                slot.ack_event.wait(0.1)
                slot.ack_event.clear()
        finally:
            token.sleeping = False
            if seceded:
                distributed.rejoin()
        return 0.0


def _wire(outcome: Outcome) -> tuple[dict[str, Any], int]:
    """The outcome as it travels, and how many bytes its value (or exception) pickles to."""
    size = 0

    def measured(obj: Any) -> bytes:
        nonlocal size
        data = pickle.dumps(obj)
        size += len(data)
        return data

    return outcome_to_wire(outcome, measured), size


def run_on_worker(exec_id: str, key: str, request: ExecutionRequest, interval: float) -> Any:
    """What the dask task actually runs: the attempt, reported back to the controller.
    Never raises: the outcome travels as data."""
    token = CancellationToken()
    slot = _Slot(key, token)
    agent = _attach(exec_id, interval, slot)
    reporter = _WorkerReporter(agent, slot, request)
    reporter.pid = os.getpid()
    reporter.where = getattr(agent.worker, "address", None)
    outcome = Outcome("crashed", message="the attempt did not end normally on the worker")
    try:
        outcome = run_attempt(request, token, reporter)  # catches what the task raises
    finally:  # in any case the agent forgets the attempt
        reporter.flush_progress()
        wire, size = _wire(outcome)
        result = agent.finish(slot, wire, inline=size <= INLINE_RESULT_BYTES)
    return result


async def _kill_this_process() -> None:  # runs on the worker chosen for a forced stop
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------------
# Controller side

#: id(client) -> (client, {exec_id: executor}): one report subscription per client (a
#: client has one handler per topic), shared by the executors that use that client.
_routes: dict[int, tuple[Any, dict[str, DaskExecutor]]] = {}
_routes_lock = threading.Lock()


def _on_reports(executors: dict[str, DaskExecutor], event: tuple[float, Any]) -> None:
    """On the client's event loop: hand a batch of reports to its executor's thread."""
    try:
        exec_id, blob, last_of = event[1]
    except (TypeError, ValueError):
        return
    ex = executors.get(exec_id)
    if ex is None:
        return
    ex._inbox.append(blob)
    if last_of is not None:
        h = ex._handles.get(last_of)
        if h is not None and h.done_at is None:
            # the last report of an attempt whose future has not finished yet: it is
            # settled when it has (see _settle_done), and that wakes the thread anyway;
            # one wake-up per attempt instead of two (each is a GIL hand-over)
            return
    ex._wake.set()


def _route(client: Any, ex: DaskExecutor, again: bool = False) -> None:
    """Reports for ``ex`` come to it through ``client``'s subscription. ``again``: the
    scheduler seems to have lost that subscription (a restart): subscribe once more."""
    with _routes_lock:
        entry = _routes.get(id(client))
        fresh = entry is None or entry[0] is not client
        if fresh:
            entry = _routes[id(client)] = (client, {})
        assert entry is not None
        entry[1][ex.exec_id] = ex
        if fresh or again:
            # before anything is submitted, on the same stream to the scheduler: no
            # report of ours can be published before the subscription is in place
            client.subscribe_topic(REPORT_TOPIC, functools.partial(_on_reports, entry[1]))


def _unroute(client: Any, ex: DaskExecutor) -> None:
    with _routes_lock:
        entry = _routes.get(id(client))
        if entry is None or entry[0] is not client:
            return
        entry[1].pop(ex.exec_id, None)
        if not entry[1]:
            del _routes[id(client)]
            with contextlib.suppress(Exception):
                client.unsubscribe_topic(REPORT_TOPIC)


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
        self.ended = False  # its last report arrived
        self.outcome: Outcome | None = None  # ... with the outcome (unless too big)
        self.result: dict[str, Any] | None = None  # fetched from the future
        self.done = threading.Event()
        self.killed = False
        self.done_at: float | None = None
        self.sleeper: threading.Thread | None = None  # waits out a ctx.sleep

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
        self.token.request_pause()  # ends a ctx.sleep the kernel waits out for the task
        self._set(pause=True)

    def resume(self) -> None:
        self.token.resume()
        self._set(pause=False)

    def _sleep(self, seq: int, seconds: float) -> None:
        """The task's ``ctx.sleep``, waited out here on the parent's token (the
        controller frees the slot, wakes it by its timer, a stop or a pause); the
        answer in the control state ends the worker's wait."""
        try:
            sleep = getattr(self._reporter, "sleep", None)
            if sleep is not None:
                sleep(seconds, self.token)
            else:  # a Reporter without a controller behind it: just wait
                self.token.sleep(seconds)
        except Exception:
            log.exception("ctx.sleep of dask task %s failed", self.key)
        finally:
            self._set(ack_seq=seq, ack=True)

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
        self._version = 0
        self._inbox: collections.deque[bytes] = collections.deque()
        # futures that finished, in order (appended by dask's callback thread), and the
        # attempts among them still waiting for their last report
        self._done: collections.deque[DaskHandle] = collections.deque()
        self._waiting: list[DaskHandle] = []
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._variable: Any = None
        self._seq = itertools.count(1)

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
                        # a free port (cluster.dashboard_link): the default 8787 is often
                        # taken by another cluster, and then dask warns into the cell
                        dashboard_address=":0",
                    )
                client = distributed.Client(self.cluster, set_as_default=False)
                self._owns_client = True
            elif isinstance(target, str):
                client = distributed.Client(target, set_as_default=False)
                self._owns_client = True
            else:
                client = target
            self._variable = distributed.Variable(f"{self.exec_id}-control", client=client)
            self._variable.set((0, {}))
            _route(client, self)
            self._thread = threading.Thread(
                target=self._drain_loop, name=f"chongming-dask-{self.exec_id}", daemon=True
            )
            self._thread.start()
            self.client = client
            return client

    def validate(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Submit-time check: dask must be able to serialise the task (cloudpickle); the
        error names the function or the argument that cannot travel."""
        why = describe_unpicklable(dumps, target, args, kwargs)
        if why is not None:
            raise ConfigurationError(
                f"the dask executor cannot serialise this task: {why}. {THREAD_HINT}"
            )

    # ----------------------------------------------------------------- launch

    def launch(self, request: ExecutionRequest, reporter: Reporter) -> DaskHandle:
        client = self.start()
        upstream = portable_upstream(request.upstream, dumps)
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
        self._done.append(handle)
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

    def _push_control(self, control: dict[str, tuple[Any, ...]]) -> None:
        """Send the control state to every worker now (an event), and keep it in the
        Variable for agents that start later or missed the event."""
        self._version += 1
        version = self._version
        self.client.log_event(CONTROL_TOPIC, [self.exec_id, version, pickle.dumps(control)])
        self._variable.set((version, control))

    # ------------------------------------------------------------- the drainer

    def _drain_loop(self) -> None:
        timeout: float | None = None
        while not self._closed:
            self._wake.wait(timeout)
            self._wake.clear()
            try:
                timeout = self._drain_once()
            except Exception:
                if self._closed:
                    return
                timeout = self.poll_interval  # the scheduler went away for a moment

    def _drain_once(self) -> float | None:
        """Push control changes, deliver reports, settle ended attempts. Returns how long
        to sleep unless woken (None: until woken)."""
        with self._lock:
            dirty, self._control_dirty = self._control_dirty, False
            control = dict(self._control) if dirty else None
            active = bool(self._handles)
        # taken before the reports are read: an attempt whose future finished has had its
        # last report queued before that (one stream from its worker, one to us), so it
        # is among the reports read below
        done = self._waiting  # kept there until settled: an error leaves them for later
        while self._done:
            done.append(self._done.popleft())
        if control is not None:
            try:
                self._push_control(control)
            except Exception:
                with self._lock:
                    self._control_dirty = True
                raise
        self._deliver_reports()
        wait = self._settle_done(done)
        if wait is None and active:
            wait = 1.0  # a backstop only: everything that matters wakes us
        return wait

    def _deliver_reports(self) -> None:
        inbox = self._inbox
        while inbox:
            try:
                batch = pickle.loads(inbox.popleft())
            except Exception:  # pragma: no cover - we pickled it ourselves
                continue
            for key, msg in batch:
                h = self._handles.get(key)
                if h is None or h.killed:
                    continue
                if msg[0] == "end":
                    # settled once dask says the task finished too (see _settle_done)
                    h.ended = True
                    if msg[1] is not None:
                        h.outcome = outcome_from_wire(msg[1])
                else:
                    self._deliver(h, msg)

    def _deliver(self, h: DaskHandle, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "sleep":
            h.sleeper = threading.Thread(
                target=h._sleep, args=(msg[1], float(msg[2])), name="chongming-dask-sleep"
            )
            h.sleeper.daemon = True
            h.sleeper.start()
            return
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

    def _finish(self, h: DaskHandle, outcome: Outcome) -> None:
        sleeper = h.sleeper
        if sleeper is not None and sleeper.is_alive():
            # the attempt ended mid-sleep (a dead worker): end the kernel's wait, which
            # then takes no slot, before the controller hears of the end
            h.token.request_stop("the attempt ended")
            sleeper.join(5.0)
        self._forget(h)
        h.token.paused = False
        h.done.set()
        h._reporter.finished(outcome)
        # released only now: the controller has sent the next launch (if any) first, so
        # the scheduler hears of it without waiting behind this release
        h.future = None

    def _settle_done(self, done: list[DaskHandle]) -> float | None:
        """Settle the attempts whose futures finished. An attempt is settled when dask
        has seen its task end, not as soon as its last report arrives: the next launch
        must find the scheduler knowing that worker is free (sent earlier, it would be
        queued behind a busy worker). Its outcome came with that report, or is fetched
        from the future (too large; or the report has not come within REPORT_GRACE);
        a worker that died or a task dask could not run ends it through the future."""
        try:
            return self._settle(done)
        finally:
            self._waiting = [h for h in done if h.key in self._handles]

    def _settle(self, done: list[DaskHandle]) -> float | None:
        now = time.monotonic()
        fetch: list[DaskHandle] = []
        wait: float | None = None
        for h in done:
            if h.key not in self._handles:
                continue
            if h.killed:
                self._forget(h)
                h.future = None
                continue
            status = h.future.status
            if h.outcome is not None:  # it ended on the worker, whatever dask made of it
                self._finish(h, h.outcome)
            elif status == "finished":
                if h.result is None:
                    fetch.append(h)
            elif status == "cancelled":
                self._finish(h, Outcome("cancelled", message="cancelled on the dask cluster"))
            else:
                self._finish(h, self._error_outcome(h))
        if fetch:
            results = self.client.gather([h.future for h in fetch], errors="skip")
            for h, r in zip(fetch, results, strict=False):
                h.result = r
        for h in done:
            r = h.result
            if r is None or h.key not in self._handles:
                continue
            assert h.done_at is not None
            if h.ended or not r.get("reported") or now - h.done_at >= REPORT_GRACE:
                if not h.ended:  # its last report never came: its tail is here too
                    for msg in r["tail"]:
                        self._deliver(h, msg)
                    if r.get("reported"):  # sent, and lost: our subscription is gone
                        _route(self.client, self, again=True)
                self._finish(h, outcome_from_wire(r["outcome"]))
            else:
                left = h.done_at + REPORT_GRACE - now
                wait = left if wait is None else min(wait, left)
        return wait

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
                self._wake.set()

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
        _unroute(self.client, self)
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
