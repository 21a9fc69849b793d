"""``cn.track`` / ``cn.tqdm`` / ``cn.trange``: a loop in a cell you can pause and stop.

In a notebook each tracked loop is a task of the kernel's controller (control/loops.py):
its row (bar, counts, rate, Pause / Resume / Stop) is the same row as a task's, and the
sidebar and ``chongming ps`` see it. Controls are flags set by other threads (the widget's
comm, the store dispatcher, an interrupt's helper) and read by the loop's own thread at
each item boundary — never a signal delivered into the middle of an item.

Elsewhere (terminal IPython, ``python script.py``, nbclient and papermill runs) the same
calls draw a text bar on stderr, like tqdm (nothing with ``disable=True``, or with
``disable=None`` on a stream that is not a terminal), and yield exactly what the plain
loop yields.

Invariants:

* Between two boundary checks the items flow through C iterators only (a batch sized
  to take a few milliseconds, like ``ctx.track``'s). Each loop's batch runs over its
  guard list; a request for a loop (``LoopHandle.wake``, the interrupt handler) empties
  the guards of that loop and of the loops nested in it (``_cut``), which ends the
  running batch before its next item, so a stop or pause lands at the exact item
  boundary; counts reported at a boundary are exact.
* A loop is ended exactly once (``_end``): by exhaustion, a stop, ``close()``, leaving
  the ``for`` early (the generator is closed), ``__exit__`` with an exception, or — for
  an exception raised in the loop's body in a notebook — the end of the cell.
* The SIGINT handler is installed only in the main thread, by the outermost tracked loop,
  and the previous handler is put back when that loop ends. The handler takes no lock:
  it hands the stop to a helper thread through a ``SimpleQueue`` (safe in a handler).
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import signal
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, count, repeat
from operator import itemgetter, length_hint
from time import monotonic, perf_counter
from types import FrameType
from typing import Any, Generic, TypeVar

from chongming_nb.core.errors import ConfigurationError, Stopped, TaskCancelled
from chongming_nb.notebook._cells import after_each_cell
from chongming_nb.runtime.cancellation import CancellationToken

__all__ = ["Stopped", "tqdm", "track", "trange"]


def _show_stop(
    shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None
) -> list[str]:
    """IPython's handler for a :class:`Stopped` that ends a cell: its line on stdout."""
    print(value, flush=True)
    return []


def show_stops_neutrally() -> bool:
    """Have IPython show a loop a person stopped as one plain line on stdout, not as an
    error output (JupyterLab draws those on its red stderr background): a stop is not
    an error. The cell still ends there, and its execution counts as not completed, so
    "Run All" stops at it too. IPython has one such handler (``set_custom_exc``): if
    something else holds it, it is kept, and the stop shows as the exception's one line
    (``Stopped._render_traceback_``). True when the handler is ours."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    held = getattr(shell, "custom_exceptions", ())
    if held == (Stopped,):
        return True
    if held:
        return False
    shell.set_custom_exc((Stopped,), _show_stop)
    return True


T = TypeVar("T")

#: A second interrupt within this many seconds of the first raises KeyboardInterrupt.
INTERRUPT_WINDOW = 3.0
ON_STOP = ("raise", "break")

_BATCH_LOW = 0.002
_BATCH_HIGH = 0.008
_MAX_BATCH = 1 << 16
_second = itemgetter(1)
#: iterators whose ``length_hint`` is exact: what they have left, always
_HINTED = frozenset(
    type(iter(x))
    for x in (
        [],
        (),
        range(1),
        range(1 << 64),
        "",
        "\u20ac",
        b"",
        bytearray(),
        {},
        {}.values(),
        {}.items(),
        set(),
        frozenset(),
        reversed([]),
    )
)


# ------------------------------------------------------------------ where we run


def _kernel_shell() -> Any:
    """IPython's shell when this is a Jupyter kernel, else None (imports nothing new)."""
    if "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except Exception:
        return None
    return ip if getattr(ip, "kernel", None) is not None else None


def _front_end_shell() -> Any:
    """The kernel's shell when a Jupyter front end (a server session) drives it.

    jupyter_server starts a session's kernel with ``JPY_SESSION_NAME``; nbclient and
    papermill do not, and nobody would see or click a row there.
    """
    if not os.environ.get("JPY_SESSION_NAME"):
        return None
    return _kernel_shell()


# ------------------------------------------------------------- the kind interrupt

# .stack: this thread's active tracked loops (iterating, or inside their ``with``), outer
# first: a loop made while one is active is nested in it
_local = threading.local()
_sigint_prev: Any = None
_sigint_depth = 0
_last_interrupt: float | None = None
_stops: queue.SimpleQueue[tqdm[Any]] = queue.SimpleQueue()
_stopper: threading.Thread | None = None
#: main-thread loops left by their ``for`` whose outcome the end of the cell decides
_deferred: list[tqdm[Any]] = []
#: the running cell's outputs whose rows went away (``leave=False``): the cell's next row
#: takes one over instead of adding an output, so nested loops leave no trail of empty
#: outputs behind; emptied when the cell ends (a row never writes into another cell)
_free_outputs: list[Any] = []


def _stack() -> list[tqdm[Any]]:
    s: list[tqdm[Any]] | None = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def _stop_worker() -> None:
    while True:
        loop = _stops.get()
        with contextlib.suppress(Exception):  # the loop ended meanwhile
            loop._request_stop("interrupt")


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _last_interrupt
    now = monotonic()
    if _last_interrupt is not None and now - _last_interrupt < INTERRUPT_WINDOW:
        _last_interrupt = None
        raise KeyboardInterrupt
    outer = next((lp for lp in _stack() if not lp._ended), None)
    if outer is None:  # nothing to stop kindly: what the previous handler would do
        prev = _sigint_prev
        if callable(prev):
            prev(signum, frame)
            return
        if prev == signal.SIG_IGN:
            return
        raise KeyboardInterrupt
    _last_interrupt = now
    # no lock in a signal handler: mark the loop and raise its token's flag by a plain
    # store (a spurious flag only costs one _boundary pass); the stop itself is
    # requested by the loop at its next boundary, or by the helper thread when the loop
    # is blocked in a pause
    outer._interrupted = True
    if outer._token is not None:
        outer._token.flag = True
    outer._cut()
    _stops.put(outer)


def _install_sigint() -> bool:
    global _sigint_prev, _sigint_depth, _stopper
    if threading.current_thread() is not threading.main_thread():
        return False
    if _sigint_depth == 0:
        try:
            prev = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, _on_sigint)
        except (ValueError, OSError):  # not the main interpreter
            return False
        _sigint_prev = prev
        if _stopper is None:
            _stopper = threading.Thread(
                target=_stop_worker, name="chongming-interrupt", daemon=True
            )
            _stopper.start()
    _sigint_depth += 1
    return True


def _uninstall_sigint() -> None:
    global _sigint_prev, _sigint_depth, _last_interrupt
    _sigint_depth -= 1
    if _sigint_depth == 0:
        if signal.getsignal(signal.SIGINT) is _on_sigint:
            signal.signal(signal.SIGINT, _sigint_prev)
        _sigint_prev = None
        _last_interrupt = None


def _after_cell(result: Any = None) -> None:
    """IPython's post_run_cell: a loop whose body raised (or that was left without its
    generator being closed) ends with its cell; the previous SIGINT handler is back."""
    stack = _stack()
    exc = getattr(result, "error_in_exec", None)
    error = exc if isinstance(exc, BaseException) else None
    left = list(reversed(stack)) + _deferred
    _deferred.clear()
    for loop in left:
        loop._end(error)
    stack[:] = [lp for lp in stack if not lp._ended]
    _free_outputs.clear()


# -------------------------------------------------------------------- the row


def _display_row(ctl: Any, task_id: str) -> tuple[Any, Any]:
    """Display the loop's row with a display id; its table keeps that output updated as
    the task changes status (so a saved notebook holds the final state)."""
    from IPython.display import display

    from chongming_nb.notebook.display import make_table

    table = make_table(ctl, task_ids=[task_id], kind="task")
    if _free_outputs:  # an output of this cell whose row went away
        dh = _free_outputs.pop()
        dh.update(table.bundle(), raw=True)
    else:
        dh = display(table.bundle(), raw=True, display_id=True)
    table.keep_display_updated(dh.display_id)
    return table, dh


# ----------------------------------------------------------------------- the bar


def _si(x: float, divisor: float = 1000) -> str:
    for unit in ("", "k", "M", "G", "T", "P", "E", "Z"):
        if abs(x) < 999.5:
            if abs(x) < 99.95:
                if abs(x) < 9.995:
                    return f"{x:1.2f}{unit}"
                return f"{x:2.1f}{unit}"
            return f"{x:3.0f}{unit}"
        x /= divisor
    return f"{x:3.1f}Y"


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def format_meter(
    n: float,
    total: float | None,
    elapsed: float,
    *,
    desc: str = "",
    unit: str = "it",
    unit_scale: bool | float = False,
    unit_divisor: float = 1000,
    postfix: str | None = None,
    width: int = 20,
) -> str:
    """The one-line text bar: ``desc: 45%|#########   | 450/1000 [00:03<00:04, 123.40it/s]``."""
    if unit_scale and unit_scale is not True:
        n, total = n * float(unit_scale), (total * float(unit_scale) if total else total)
    num = (lambda x: _si(x, unit_divisor)) if unit_scale else (lambda x: f"{x:g}")
    rate = n / elapsed if elapsed > 0 and n else None
    rate_txt = "?" if rate is None else (_si(rate, unit_divisor) if unit_scale else f"{rate:.2f}")
    prefix = f"{desc}: " if desc else ""
    tail = f", {postfix}" if postfix else ""
    if total:
        frac = min(1.0, max(0.0, n / total))
        fill = int(frac * width)
        bar = "#" * fill + " " * (width - fill)
        remaining = _clock((total - n) / rate) if rate else "?"
        return (
            f"{prefix}{frac * 100:3.0f}%|{bar}| {num(n)}/{num(total)} "
            f"[{_clock(elapsed)}<{remaining}, {rate_txt}{unit}/s{tail}]"
        )
    return f"{prefix}{num(n)}{unit} [{_clock(elapsed)}, {rate_txt}{unit}/s{tail}]"


class tqdm(Generic[T]):
    """tqdm's everyday surface, controllable: ``from chongming_nb import tqdm, trange``.

    Keywords and methods as tqdm's (``desc``, ``total``, ``unit``, ``unit_scale``,
    ``initial``, ``leave``, ``disable``, ``mininterval``, ``postfix``; ``update``,
    ``set_description``, ``set_postfix``, ``close``, a context manager). Those that only
    shape tqdm's text (``ncols``, ``ascii``, ``bar_format``, ``colour``, ...) are
    accepted and ignored by the notebook row.

    Beyond tqdm: ``on_stop="raise"`` (default) ends a stopped loop with
    :class:`chongming_nb.Stopped`, shown in a notebook as one line; ``on_stop="break"``
    just ends the loop, and ``bar.stopped`` says so. ``controller=`` records the loop on
    that controller (by default: the kernel's, when a notebook front end is attached).
    """

    def __init__(
        self,
        iterable: Iterable[T] | None = None,
        desc: str | None = None,
        total: float | None = None,
        leave: bool | None = True,
        file: Any = None,
        ncols: int | None = None,
        mininterval: float = 0.1,
        maxinterval: float = 10.0,
        miniters: float | None = None,
        ascii: bool | str | None = None,
        disable: bool | None = False,
        unit: str = "it",
        unit_scale: bool | float = False,
        dynamic_ncols: bool = False,
        smoothing: float = 0.3,
        bar_format: str | None = None,
        initial: float = 0,
        position: int | None = None,
        postfix: Any = None,
        unit_divisor: float = 1000,
        write_bytes: bool = False,
        lock_args: Any = None,
        nrows: int | None = None,
        colour: str | None = None,
        delay: float = 0.0,
        gui: bool = False,
        *,
        on_stop: str = "raise",
        controller: Any = None,
        tags: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"tqdm() got unknown argument(s): {', '.join(sorted(kwargs))}")
        if on_stop not in ON_STOP:
            raise ConfigurationError(f"on_stop must be one of {ON_STOP}, got {on_stop!r}")
        if mininterval < 0:
            raise ConfigurationError(f"mininterval must be >= 0, got {mininterval!r}")
        if total is None and iterable is not None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except (TypeError, AttributeError):
                total = None
        if total == float("inf"):
            total = None
        self.iterable = iterable
        self.desc = desc or ""
        self.total = total
        self.leave = leave
        self.n: float = initial
        self.initial = initial
        self.unit = unit
        self.unit_scale = unit_scale
        self.unit_divisor = unit_divisor
        self.mininterval = mininterval
        self.on_stop = on_stop
        self.stopped = False
        self.postfix: str | None = None
        self._name = desc or "loop"
        self._ended = False
        self._iterating = False
        self._rec: Any = None
        self._dh: Any = None
        self._table: Any = None
        self._fp: Any = None
        self._token: CancellationToken | None = None
        self._chain: list[tqdm[Any]] = []
        self._sigint = False
        self._stopped_by: str | None = None
        self._interrupted = False
        self._live: tuple[float, Any, int | None] | None = None
        self._with = False
        self._cell = False
        self._deferred = False
        self._gone = False
        #: the Stopped of a loop nested in this one, on its way out through this loop
        #: (``_boundary``): this loop ends stopped with it, unless it goes on iterating
        self._inner_stop: Stopped | None = None
        #: what this loop's running batch iterates over (``_batches``); emptied: it ends
        self._guard: list[Any] = []
        #: the tracked loops of the thread that made this one, outer first (``_cut``)
        self._loops = _stack()
        self._start = monotonic()
        self._last_print = -math.inf
        shell = _front_end_shell() if controller is None else None
        if disable is None and shell is None:
            stream = sys.stderr if file is None else file
            isatty = getattr(stream, "isatty", None)
            disable = not (callable(isatty) and isatty())
        self.disable = bool(disable)
        if postfix is not None:
            if isinstance(postfix, Mapping):
                self.set_postfix(postfix, refresh=False)
            else:
                self.set_postfix_str(str(postfix), refresh=False)
        if self.disable:
            return
        ctl = controller
        if ctl is None and shell is not None:
            from chongming_nb.control.kernel import get_controller

            ctl = get_controller()
        stack = _stack()
        if ctl is not None:
            from chongming_nb.control.loops import LoopRecord

            self._rec = LoopRecord(ctl, self._name, total, unit, tags=tags)
            self._rec.handle.wake = self._cut
            self._rec.progress(self.n, None, self._message())
            self._token = self._rec.token
        else:
            self._token = CancellationToken()
            self._fp = sys.stderr if file is None else file
        self._chain = [lp for lp in stack if lp._token is not None] + [self]
        if shell is not None and threading.current_thread() is threading.main_thread():
            self._cell = after_each_cell(shell, _after_cell)
            try:
                self._table, self._dh = _display_row(ctl, self._rec.task_id)
            except Exception:  # no front end after all: the record stands
                self._dh = None
        self._refresh_text(force=True)

    # ----------------------------------------------------------------- iteration

    def __iter__(self) -> Iterator[T]:
        iterable = self.iterable
        if iterable is None:
            raise TypeError("'tqdm' object is not iterable without an iterable")
        if self.disable or self._ended:
            return iter(iterable)
        self._iterating = True
        self._activate()
        # the items flow through C iterators only (chain -> map -> the loop's iterator);
        # this object's Python code runs once per batch, in _batches
        return chain.from_iterable(self._batches(iter(iterable)))

    def _batches(self, it: Iterator[T]) -> Iterator[Iterator[T]]:
        """One C iterator per batch. Before each: refill the guard, then look at the
        flags; a request that comes after the look empties the guard, and the batch ends
        before its next item (the guard is asked before the loop's iterator).

        Counting: a built-in iterator says exactly how many items it has left
        (``length_hint``), so its guard holds the iterator itself, ``batch`` times, and
        a batch is ``map(next, guard)``; any other iterator is counted by a ``count``
        zipped in after the guard.
        """
        n = self.n
        batch = 1
        rec = self._rec
        guard = self._guard
        hinted = type(it) in _HINTED
        left = length_hint(it) if hinted else 0
        counter = count(0)
        try:
            while not hinted or left:
                self._inner_stop = None  # (iterating again: a Stopped inside was caught)
                guard[:] = repeat(it if hinted else None, batch)
                if self._flagged() and self._boundary():
                    return
                t0 = perf_counter()
                if hinted:
                    self._live = (n, it, left)
                    yield map(next, guard)
                    now_left = length_hint(it)
                    produced = left - now_left
                    left = now_left
                else:
                    counter = count(0)
                    self._live = (n, counter, None)
                    yield map(_second, zip(guard, it, counter, strict=False))
                    produced = next(counter)
                dt = perf_counter() - t0
                if produced:
                    n += produced
                    self.n = n
                    if rec is not None:
                        rec.reporter.progress(n, None, None, None)
                    elif self._fp is not None:
                        self._refresh_text()
                elif guard and not hinted:  # nothing produced, guard still full: exhausted
                    break
                if dt < _BATCH_LOW and batch < _MAX_BATCH:
                    batch *= 2
                elif dt > _BATCH_HIGH and batch > 1:
                    batch = max(1, batch // 2)
        except GeneratorExit:  # left early: break, return, or an exception in the body
            # the item the body had when it let go is not done (tqdm counts the same)
            self.n = self._live_n()
            self._left()
            raise
        except TaskCancelled:  # a Stopped from _boundary: already ended
            raise
        except BaseException as exc:  # thrown into the loop
            self._end(exc)
            raise
        else:
            self._inner_stop = None  # every item done: not ended by a stop inside
            self._end(None)
        finally:
            guard.clear()  # (it holds the loop's iterator)

    def _activate(self) -> None:
        stack = _stack()
        if self not in stack:
            stack.append(self)
        if not self._sigint:
            self._sigint = _install_sigint()

    def _cut(self) -> None:
        """End the running batch of this loop and of every loop nested in it, before
        its next item (any thread, and the interrupt handler: no lock). A loop that is
        not on its thread's stack cuts every loop there: a batch ended early only costs
        a boundary look."""
        self._guard.clear()
        for lp in reversed(self._loops):
            if lp is self:
                break
            lp._guard.clear()

    def _flagged(self) -> bool:
        """A stop, a pause, a probe or an interrupt is pending for this loop or one it is
        nested in (one attribute read per loop of the chain, once per batch)."""
        for lp in self._chain:
            tok = lp._token
            if tok is not None and tok.flag:
                return True
        return False

    def _boundary(self) -> bool:
        """At an item boundary with a flag up: answer probes, block while paused, and
        deliver a stop. True: the loop ends here quietly (``on_stop="break"``)."""
        for i, loop in enumerate(self._chain):
            tok = loop._token
            if tok is None or not tok.flag:
                continue
            if loop._interrupted and not tok.stop_requested:
                loop._request_stop("interrupt")  # the helper thread may not have yet
            blocked = monotonic()
            try:
                tok.checkpoint()  # blocks while paused (the row says paused)
            except TaskCancelled:
                self._not_worked(monotonic() - blocked)
                by = loop._stopped_by or "you"
                inner = self._chain[i:]
                for lp in inner[:-1]:
                    lp.n = lp._live_n()  # suspended in its body, in the middle of a batch
                for lp in reversed(inner):
                    reason = (
                        f"stopped by {by}"
                        if lp is loop
                        else f"its outer loop {loop._name!r} stopped"
                    )
                    lp._end_stopped(reason)
                if loop is self and self.on_stop == "break":
                    return True
                show_stops_neutrally()
                stop = Stopped(
                    loop._name,
                    loop.n,
                    loop.total,
                    monotonic() - loop._start,
                    by=by,
                    task_id=loop._rec.task_id if loop._rec is not None else None,
                )
                for lp in self._chain[:i]:
                    lp._inner_stop = stop
                raise stop from None
            self._not_worked(monotonic() - blocked)
        return False

    def _not_worked(self, seconds: float) -> None:
        """The loops of the chain stood still ``seconds`` (paused): their elapsed time,
        rate and stop line leave it out, as the row's elapsed time does."""
        for lp in self._chain:
            lp._start += seconds

    def _live_n(self) -> float:
        """The count of a loop whose body is running (the item it is in is not done):
        its batch's start plus what the batch handed out so far (``repr`` reads a
        ``count`` without advancing it)."""
        if self._live is None:
            return self.n
        base, source, left = self._live
        if left is not None:
            pulled = left - length_hint(source)
        else:
            pulled = int(repr(source)[len("count(") : -1])
        return base + max(0, pulled - 1)

    def _request_stop(self, by: str) -> None:
        """From the interrupt helper thread, or the loop's own at a boundary."""
        if self._ended or (self._token is not None and self._token.stop_requested):
            return
        self._stopped_by = by
        if self._rec is not None:
            # an interrupt names itself through the actor ("stopped by interrupt at 14:03");
            # a reason saying the same again would only repeat it
            reason = None if by == "interrupt" else f"stopped by {by}"
            self._rec.ctl.stop(self._rec.task_id, actor=by, reason=reason)
        elif self._token is not None:
            self._token.request_stop(f"stopped by {by}")
            self._cut()

    # ---------------------------------------------------------------- the end

    def _left(self) -> None:
        """The ``for`` let go of the loop. A ``break`` and an exception raised in the body
        look the same from here (the exception is not visible to the generator), so the
        outcome waits for who can see it: ``__exit__``, or the end of the cell."""
        if self._ended:
            return
        if self._with or self._cell:
            self._deferred = True
            self._leave()
            if self._cell and not self._with:
                _deferred.append(self)
        else:
            self._end(None)

    def _leave(self) -> None:
        if self._gone:
            return
        self._gone = True
        stack = _stack()
        if self in stack:
            stack.remove(self)
        if self._sigint and threading.current_thread() is threading.main_thread():
            self._sigint = False
            _uninstall_sigint()
        if self._fp is not None:
            self._refresh_text(force=True)
            try:
                self._fp.write("\n" if self._keep() else "\r\x1b[K")
                self._fp.flush()
            except Exception:
                pass

    def _keep(self) -> bool:
        # tqdm's leave=None: keep the bar only when it is not nested in another
        return bool(self.leave) if self.leave is not None else len(self._chain) <= 1

    def _end(self, exc: BaseException | None) -> None:
        if isinstance(exc, KeyboardInterrupt):
            # a person's interrupt (the second within the window, or raised in the body):
            # a stop, not a failure; the KeyboardInterrupt itself goes on as always
            self._stopped_by = "interrupt"
            self._end_stopped("stopped by interrupt", actor="interrupt")
            return
        if self._ended:
            return
        inner, self._inner_stop = self._inner_stop, None
        if inner is not None and exc is None:
            exc = inner  # (a ``for`` cannot see what made it let go: this did)
        if isinstance(exc, Stopped) and self._deferred and exc is not inner:
            exc = None  # another loop's stop, after this one was left (a break) in its cell
        if isinstance(exc, TaskCancelled):
            # a stop on its way out through this loop (a loop in its body, the checkpoint
            # of a stopped task): this loop ends with it, stopped, not failed by it
            why = f"its inner loop {exc.name!r} stopped" if isinstance(exc, Stopped) else None
            self._end_stopped(why or str(exc) or "stopped")
            return
        self._ended = True
        if self._rec is not None:
            if exc is None:
                self._rec.finish_succeeded(self.n)
            else:
                self._rec.finish_failed(self.n, exc)
        self._leave()
        self._show_final()

    def _show_final(self) -> None:
        """The cell's output takes the loop's final state (so a saved notebook and its
        html export show how it ended), or goes away with ``leave=False``."""
        dh, self._dh = self._dh, None
        if dh is None or self._rec is None or self._table is None:
            return
        with contextlib.suppress(Exception):
            if self._keep():  # now, not at the table's next flush
                self._table.rewrite_now()
            else:
                self._table.close()  # first: it would put the row back at its next flush
                dh.update({"text/plain": ""}, raw=True)
                if threading.current_thread() is threading.main_thread():
                    _free_outputs.append(dh)  # the cell's next row takes it over

    def _end_stopped(self, reason: str, actor: str = "loop") -> None:
        if self._ended:
            return
        self._ended = True
        self.stopped = True
        if self._rec is not None:
            self._rec.finish_stopped(self.n, reason, actor=actor)
        self._leave()
        self._show_final()

    def close(self) -> None:
        """End the bar (the loop's task succeeds with the count it reached)."""
        self._end(None)

    def __enter__(self) -> tqdm[T]:
        self._with = True
        if not self.disable and not self._ended:
            self._activate()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # (a stop of this loop ended it already; one from inside it ends it here)
        self._end(exc if isinstance(exc, BaseException) else None)

    # --------------------------------------------------------------- tqdm's API

    def update(self, n: float = 1) -> bool | None:
        """Add ``n`` to the count. An item boundary: a pause blocks here and a stop
        raises :class:`Stopped` (``on_stop="break"``: returns, and ``stopped`` is True)."""
        if self.disable or self._ended:
            return None
        self.n += n
        if self._rec is not None:
            self._rec.reporter.progress(self.n, None, None, None)
        elif self._fp is not None:
            self._refresh_text()
        if self._flagged():
            self._boundary()
        return True

    def _message(self) -> str | None:
        desc = self.desc.rstrip(": ") if self.desc else ""
        parts = []
        if desc and desc != self._name:
            parts.append(desc)
        if self.postfix:
            parts.append(self.postfix)
        return " ".join(parts) or None

    def _changed(self, refresh: bool) -> None:
        if self._ended or self.disable:
            return
        if self._rec is not None:
            msg = self._message()
            self._rec.reporter.progress(None, None, None, msg if msg is not None else "")
        elif refresh:
            self._refresh_text(force=True)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc + ": " if desc else ""
        self._changed(refresh)

    def set_description_str(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or ""
        self._changed(refresh)

    def set_postfix(
        self, ordered_dict: Mapping[str, Any] | None = None, refresh: bool = True, **kwargs: Any
    ) -> None:
        items = dict(ordered_dict or {})
        for key in sorted(kwargs):
            items[key] = kwargs[key]
        parts = []
        for key, value in items.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                value = f"{value:.3g}"
            parts.append(f"{key}={str(value).strip()}")
        self.postfix = ", ".join(parts)
        self._changed(refresh)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = str(s)
        self._changed(refresh)

    def reset(self, total: float | None = None) -> None:
        self.n = 0
        if total is not None:
            self.total = None if total == float("inf") else total
        if self.disable or self._ended:
            return
        self._start = monotonic()
        if self._rec is not None:
            self._rec.progress(0, self.total)
        self._refresh_text(force=True)

    def refresh(self, *args: Any, **kwargs: Any) -> None:
        self._refresh_text(force=True)

    def clear(self, *args: Any, **kwargs: Any) -> None:
        if self._fp is not None:
            with contextlib.suppress(Exception):
                self._fp.write("\r\x1b[K")

    @classmethod
    def write(cls, s: str, file: Any = None, end: str = "\n", nolock: bool = False) -> None:
        """Print a line without breaking a bar (as tqdm.write)."""
        fp = sys.stdout if file is None else file
        fp.write(s + end)

    @classmethod
    def pandas(cls, **tqdm_kwargs: Any) -> None:
        """Give pandas ``progress_apply`` / ``progress_map`` with this bar (as tqdm's
        ``tqdm.pandas()``): Series and DataFrame ``progress_apply``, Series
        ``progress_map``, DataFrame ``progress_map`` / ``progress_applymap`` and GroupBy
        ``progress_apply``. Each call of the function is an item boundary: a pause blocks
        before it, a stop raises :class:`Stopped` before it (no partial result)."""
        _register_pandas(cls, tqdm_kwargs)

    @property
    def task_id(self) -> str | None:
        """The id of this loop's task (None when the loop is not on a controller)."""
        return self._rec.task_id if self._rec is not None else None

    @property
    def format_dict(self) -> dict[str, Any]:
        elapsed = monotonic() - self._start
        return {
            "n": self.n,
            "total": self.total,
            "elapsed": elapsed,
            "prefix": self.desc,
            "unit": self.unit,
            "unit_scale": self.unit_scale,
            "unit_divisor": self.unit_divisor,
            "postfix": self.postfix,
            "rate": self.n / elapsed if elapsed > 0 else None,
            "initial": self.initial,
        }

    def _text(self) -> str:
        return format_meter(
            self.n,
            self.total,
            monotonic() - self._start,
            desc=self.desc.rstrip(": ") if self.desc else "",
            unit=self.unit,
            unit_scale=self.unit_scale,
            unit_divisor=self.unit_divisor,
            postfix=self.postfix,
        )

    def _refresh_text(self, force: bool = False) -> None:
        fp = self._fp
        if fp is None:
            return
        now = monotonic()
        if not force and now - self._last_print < self.mininterval:
            return
        self._last_print = now
        try:
            fp.write("\r" + self._text())
            fp.flush()
        except Exception:  # a closed or broken stream never breaks the loop
            self._fp = None

    def __len__(self) -> int:
        if self.iterable is None:
            return int(self.total or 0)
        shape = getattr(self.iterable, "shape", None)
        if shape is not None:
            return int(shape[0])
        if hasattr(self.iterable, "__len__"):
            return len(self.iterable)  # type: ignore[arg-type]
        return int(self.total or 0)

    def __bool__(self) -> bool:
        if self.total is not None:
            return self.total > 0
        if self.iterable is None:
            raise TypeError("bool() undefined when iterable == total == None")
        return bool(self.iterable)

    def __str__(self) -> str:
        return self._text()

    def __repr__(self) -> str:
        return f"<chongming_nb.tqdm {self._text()}>"

    def __hash__(self) -> int:
        return id(self)


def _len(iterable: Any) -> int | None:
    try:
        return len(iterable)
    except (TypeError, AttributeError):
        return None


def _pandas_total(obj: Any, method: str, kwargs: Mapping[str, Any]) -> int | None:
    ngroups = getattr(obj, "ngroups", None)
    if ngroups is not None:
        return int(ngroups)
    if method in ("map", "applymap") and getattr(obj, "ndim", 1) == 2:
        return int(obj.size)
    if getattr(obj, "ndim", 1) == 1:
        return len(obj)
    axis = kwargs.get("axis", 0)
    axis = 1 if axis in (1, "columns") else 0
    # apply over axis 0 calls the function once per column, over axis 1 once per row
    return int(obj.shape[1 - axis])


def _register_pandas(cls: type[tqdm[Any]], tqdm_kwargs: Mapping[str, Any]) -> None:
    from pandas import DataFrame, Series
    from pandas.core.groupby.generic import DataFrameGroupBy, SeriesGroupBy

    def progress(method: str) -> Any:
        def run(self: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            options = dict(tqdm_kwargs)
            total = options.pop("total", None)
            if total is None:
                total = _pandas_total(self, method, kwargs)
            bar = cls(total=total, **options)

            def wrapper(*a: Any, **k: Any) -> Any:
                value = func(*a, **k)
                # counted when done; the boundary check in update() comes before the
                # next call
                bar.update(1 if not bar.total or bar.n < bar.total else 0)
                return value

            with bar:
                return getattr(self, method)(wrapper, *args, **kwargs)

        run.__name__ = f"progress_{method}"
        return run

    Series.progress_apply = progress("apply")  # type: ignore[attr-defined]
    Series.progress_map = progress("map")  # type: ignore[attr-defined]
    DataFrame.progress_apply = progress("apply")  # type: ignore[attr-defined]
    DataFrame.progress_map = progress("map")  # type: ignore[attr-defined]
    DataFrame.progress_applymap = progress("map")  # type: ignore[attr-defined]
    DataFrameGroupBy.progress_apply = progress("apply")  # type: ignore[attr-defined]
    SeriesGroupBy.progress_apply = progress("apply")  # type: ignore[attr-defined]


def trange(*args: int, **kwargs: Any) -> tqdm[int]:
    """``tqdm(range(*args), **kwargs)``."""
    return tqdm(range(*args), **kwargs)


def track(
    iterable: Iterable[T],
    desc: str | None = None,
    total: float | None = None,
    unit: str = "it",
    **kwargs: Any,
) -> tqdm[T]:
    """A loop in a cell with a row you can pause and stop (the keywords of :class:`tqdm`)."""
    return tqdm(iterable, desc=desc, total=total, unit=unit, **kwargs)
