"""TaskContext: the one object injected into a task as its first argument.

It is built by the executor for one attempt and never captured in a closure: a context
held over from an earlier attempt would carry a token that nobody signals any more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import InitVar, dataclass, field
from datetime import datetime
from itertools import count, islice
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from chongming_nb.core.errors import ConfigurationError
from chongming_nb.core.validation import check_seconds
from chongming_nb.runtime.cancellation import CancellationToken

if TYPE_CHECKING:
    from chongming_nb.runtime.reporting import Reporter

T = TypeVar("T")

_TASK_LOGGER = logging.getLogger("chongming_nb.tasks")
_TASK_LOGGER.setLevel(logging.INFO)
_TASK_LOGGER.propagate = False
_first = itemgetter(0)

# track() sizes its batches so that one batch of the caller's loop takes roughly this
# long: short enough that stop/pause land within ~20 ms, long enough that per-item
# overhead is a C-level iterator step.
_BATCH_TARGET_LOW = 0.002
_BATCH_TARGET_HIGH = 0.008
_MAX_BATCH = 1 << 20
# ctx.sleep without a controller behind it wakes this often to answer liveness probes
_LOCAL_SLEEP_SLICE = 1.0


class _TaskLogAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        extra = dict(self.extra or {})
        extra.update(kwargs.pop("extra", {}) or {})
        fields = {
            k: v for k, v in kwargs.items() if k not in ("exc_info", "stack_info", "stacklevel")
        }
        for k in fields:
            kwargs.pop(k)
        if fields:
            msg = f"{msg} " + " ".join(f"{k}={v!r}" for k, v in fields.items())
        kwargs["extra"] = extra
        return msg, kwargs


@dataclass(slots=True, kw_only=True, eq=False, repr=False)
class TaskContext:
    """What a running task can see and do. See the user guide for the checkpoint rule:
    long loops must call ``checkpoint()`` (or iterate with ``track``), or stop and pause
    cannot reach them."""

    task_id: str
    name: str
    attempt: int
    token: CancellationToken
    reporter: InitVar[Reporter]
    pipeline_run_id: str | None = None
    deadline: datetime | None = None
    artifacts_root: InitVar[Path | None] = None
    #: Cooperative stop/pause point: returns at once, raises TaskCancelled on a stop
    #: request, blocks while paused. Bound straight to the token: one attribute check.
    checkpoint: Callable[[], None] = field(init=False)
    _reporter: Reporter = field(init=False)
    _artifacts_root: Path | None = field(init=False)
    _artifacts: Path | None = field(init=False, default=None)
    _log: _TaskLogAdapter | None = field(init=False, default=None)

    def __post_init__(self, reporter: Reporter, artifacts_root: Path | None) -> None:
        self._reporter = reporter
        self._artifacts_root = artifacts_root
        self.checkpoint = self.token.checkpoint

    @property
    def log(self) -> logging.LoggerAdapter:  # type: ignore[type-arg]
        """A logger whose records go to this task's log (built on first use: most tasks
        never log, and an adapter per attempt is measurable at thousands of tasks/s)."""
        if self._log is None:
            self._log = _TaskLogAdapter(
                _TASK_LOGGER,
                {"task_id": self.task_id, "task_name": self.name, "attempt": self.attempt},
            )
        return self._log

    async def acheckpoint(self) -> None:
        await self.token.acheckpoint()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` as a task that gives its place away: under a controller's
        thread, process or dask executor the task releases its concurrency slot while it
        sleeps (another task may run; on processes, in another child; on dask, the task
        secedes from its worker's thread pool) and no idle timeout counts the sleep. A
        stop ends the sleep at once (TaskCancelled: the task ends STOPPED); a pause too
        (the task pauses; after its resume it sleeps until the sleep's original end, not
        at all if that has passed).

        Without a controller behind it the task sleeps where it is, and still answers
        stop, pause and liveness checks within a second."""
        seconds = check_seconds("ctx.sleep seconds", seconds)
        if seconds is None:
            raise ConfigurationError("ctx.sleep seconds must be a number of seconds, got None")
        token = self.token
        token.checkpoint()
        reporter = self._reporter
        sleep = getattr(reporter, "sleep", None)
        # the controller's clock when there is one (a FakeClock in tests)
        monotonic = getattr(reporter, "monotonic", time.monotonic)
        end = monotonic() + seconds
        while (left := end - monotonic()) > 0:
            if sleep is not None:
                sleep(left, token)  # the controller: slot released, woken by its timer
            else:
                token.sleep(min(left, _LOCAL_SLEEP_SLICE))
            token.checkpoint()  # a stop raises here; a pause blocks here until resume

    def progress(
        self,
        done: float | None = None,
        total: float | None = None,
        unit: str | None = None,
        message: str | None = None,
    ) -> None:
        """Report progress. Any argument left out keeps its previous value. The task's
        snapshot always shows the latest value; events are throttled by the controller.

        Not a checkpoint: a stop or pause is never delivered here (so a progress report
        is safe anywhere, a ``finally:`` included). It counts as a sign of life for the
        idle timeout. Loops that should be stoppable call ``checkpoint()`` too, or
        iterate with ``track()``, which does both."""
        self.token.beats += 1
        self._reporter.progress(done, total, unit, message)

    def track(
        self,
        iterable: Iterable[T],
        total: float | None = None,
        unit: str | None = None,
        message: str | None = None,
    ) -> Iterator[T]:
        """Iterate with a checkpoint and a progress report between batches of items.

        Like tqdm's loop wrapper, but controllable. Batches adapt so that a batch of the
        caller's loop takes a few milliseconds: stop and pause land within ~20 ms while
        the per-item cost stays a C-level iterator step.
        """
        sized = False
        if total is None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
                sized = True
            except TypeError:
                total = None
        reporter = self._reporter
        token = self.token
        from time import perf_counter

        reporter.progress(0, total, unit, message)
        it = iter(iterable)
        done = 0
        batch = 1
        if sized:
            # The length is known: count by batch sizes, so each item costs one islice
            # step. If len() was wrong, the general loop below counts the rest.
            n = int(total or 0)
            while done < n:
                token.checkpoint()
                t0 = perf_counter()
                yield from islice(it, batch)
                dt = perf_counter() - t0
                done = min(done + batch, n)
                reporter.progress(done, None, None, None)
                if dt < _BATCH_TARGET_LOW and batch < _MAX_BATCH:
                    batch *= 2
                elif dt > _BATCH_TARGET_HIGH and batch > 1:
                    batch = max(1, batch // 2)
        while True:
            token.checkpoint()
            t0 = perf_counter()
            counter = count(done)
            yield from map(_first, zip(islice(it, batch), counter, strict=False))
            produced = next(counter)
            dt = perf_counter() - t0
            exhausted = produced - done < batch
            done = produced
            reporter.progress(done, None, None, None)
            if exhausted:
                break
            if dt < _BATCH_TARGET_LOW and batch < _MAX_BATCH:
                batch *= 2
            elif dt > _BATCH_TARGET_HIGH and batch > 1:
                batch = max(1, batch // 2)
        token.checkpoint()

    def emit(self, kind: str, payload: Any = None) -> None:
        """Publish a custom event (TaskOutput) on the controller's bus."""
        if not isinstance(kind, str) or not kind:
            raise ValueError("emit(kind, payload) needs a non-empty string kind")
        self._reporter.emit(kind, payload)

    def upstream(self, key: Any) -> Any:
        """The result of a dependency, by handle, task id, node or name."""
        return self._reporter.upstream(key)

    @property
    def artifacts(self) -> Path:
        """A directory for this attempt's files (created on first use); attempts never
        share one, so a retry cannot trip over half-written files."""
        if self._artifacts is None:
            if self._artifacts_root is None:
                import tempfile

                root = Path(tempfile.gettempdir()) / "chongming-artifacts"
            else:
                root = self._artifacts_root
            path = root / self.task_id / f"attempt-{self.attempt}"
            path.mkdir(parents=True, exist_ok=True)
            self._artifacts = path
        return self._artifacts

    @property
    def stop_requested(self) -> bool:
        return self.token.stop_requested

    def __repr__(self) -> str:
        return f"<TaskContext {self.name} id={self.task_id} attempt={self.attempt}>"
