"""Parent side of the process executor's warm children: one ``_Child`` per child
process, and the pool of idle ones.

Invariants:

* A child is either running one attempt (owned by that attempt's handle) or idle in the
  pool, never both: the handle hands it back only after the attempt's "finished"
  message, and only when it was not stopped by force.
* A child that was terminated or killed, crashed, said it is unfit for reuse, or runs
  code from a module file edited since it loaded it, never runs another attempt.
* Idle children are retired after ``idle_timeout`` seconds, beyond ``max_idle``, and when
  the executor shuts down.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import tempfile
import threading
import time
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from chongming_nb.runtime.executors import _process_child

_ctx_lock = threading.Lock()
_contexts: dict[str, BaseContext] = {}
_names = itertools.count(1)


def context(method: str) -> BaseContext:
    with _ctx_lock:
        ctx = _contexts.get(method)
        if ctx is None:
            ctx = multiprocessing.get_context(method)
            if method == "forkserver":
                # forked children start with the runtime already imported
                ctx.set_forkserver_preload(["chongming_nb.runtime.executors._process_child"])
            _contexts[method] = ctx
        return ctx


class _Child:
    """One child process and what the parent keeps to talk to it."""

    def __init__(self, ctx: BaseContext) -> None:
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.conn = parent_conn
        self.stop_ev, self.pause_ev, self.wake_ev = ctx.Event(), ctx.Event(), ctx.Event()
        self.reason: Any = ctx.Array("c", 256, lock=False)
        fd, self.crash_path = tempfile.mkstemp(prefix="chongming-crash-", suffix=".txt")
        os.close(fd)
        #: source files of modules the child imported while running attempts -> mtime
        self.files: dict[str, int] = {}
        self.idle_since = 0.0
        self.attempts = 0
        self.process: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
            target=_process_child.serve,
            args=(
                child_conn,
                self.stop_ev,
                self.pause_ev,
                self.wake_ev,
                self.reason,
                self.crash_path,
            ),
            name=f"chongming-proc-{next(_names)}",
            daemon=True,
        )
        try:
            self.process.start()
        except BaseException:
            self.drop_crash_file()
            raise
        finally:
            child_conn.close()

    def run(self, payload: bytes, sys_path: list[str], cwd: str) -> None:
        """Start an attempt: fresh stop/pause state, then the request. A child that died
        meanwhile is found by the handle's reader (``is_alive``), not here."""
        self.stop_ev.clear()
        self.pause_ev.clear()
        self.wake_ev.clear()
        self.reason.value = b""
        self.attempts += 1
        with contextlib.suppress(OSError):
            self.conn.send(("run", payload, sys_path, cwd))

    def stale(self) -> bool:
        """Has a module file this child loaded changed since (or was it loaded while it
        was being edited)?"""
        for path, mtime in self.files.items():
            if mtime < 0:
                return True
            try:
                if os.stat(path).st_mtime_ns != mtime:
                    return True
            except OSError:
                return True
        return False

    def close(self, grace: float) -> None:
        """Ask the child to exit; terminate, then kill, if it does not."""
        with contextlib.suppress(OSError):
            self.conn.send(("exit",))
        p = self.process
        p.join(grace)
        if p.is_alive():
            p.terminate()
            p.join(grace)
            if p.is_alive():
                p.kill()
                p.join(5.0)
        self.dispose()

    def dispose(self) -> None:
        """The process is gone (or going): release what the parent holds for it."""
        with contextlib.suppress(OSError):
            self.conn.close()
        self.drop_crash_file()

    def drop_crash_file(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.crash_path)


class ChildPool:
    """Idle warm children of one executor (most recently used first)."""

    def __init__(self, method: str, idle_timeout: float, max_idle: int, grace: float) -> None:
        self.method = method
        self.idle_timeout = idle_timeout
        self.max_idle = max_idle
        self.grace = grace
        self._idle: list[_Child] = []
        self._cond = threading.Condition()
        self._reaper: threading.Thread | None = None
        self._closed = False
        self.started = 0  # children started, for tests and benchmarks

    def acquire(self) -> _Child:
        """A warm idle child fit to run the next attempt, or a new one."""
        retire: list[_Child] = []
        child: _Child | None = None
        with self._cond:
            while self._idle:
                c = self._idle.pop()
                if c.process.is_alive() and not c.stale():
                    child = c
                    break
                retire.append(c)
        for c in retire:
            self._retire_async(c)
        if child is None:
            child = _Child(context(self.method))
            with self._cond:
                self.started += 1
        return child

    def release(self, child: _Child) -> None:
        """Back to the pool after an attempt that left the child fit for reuse."""
        with self._cond:
            if not self._closed and len(self._idle) < self.max_idle:
                child.idle_since = time.monotonic()
                self._idle.append(child)
                if self._reaper is None:
                    self._reaper = threading.Thread(
                        target=self._reap, name="chongming-proc-reaper", daemon=True
                    )
                    self._reaper.start()
                self._cond.notify_all()
                return
        self._retire_async(child)

    def idle_pids(self) -> list[int | None]:
        with self._cond:
            return [c.process.pid for c in self._idle]

    def _reap(self) -> None:
        """Retire children idle for longer than ``idle_timeout``; leave when none is idle."""
        while True:
            expired: list[_Child] = []
            with self._cond:
                if not self._idle:
                    self._reaper = None
                    return
                now = time.monotonic()
                keep: list[_Child] = []
                for c in self._idle:
                    (expired if now - c.idle_since >= self.idle_timeout else keep).append(c)
                self._idle = keep
                if not expired and keep:
                    oldest = min(c.idle_since for c in keep)
                    self._cond.wait(max(0.0, oldest + self.idle_timeout - now))
            for c in expired:
                c.close(self.grace)

    def _retire_async(self, child: _Child) -> None:
        threading.Thread(
            target=child.close, args=(self.grace,), name="chongming-proc-retire", daemon=True
        ).start()

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for c in idle:
            with contextlib.suppress(OSError):
                c.conn.send(("exit",))
        for c in idle:
            c.close(self.grace)
