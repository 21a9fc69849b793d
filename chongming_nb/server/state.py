"""The state the server extension shares between requests (``ServerState``, kept in
the web app's settings under ``SETTINGS_KEY``).

The store is the one named by ``$CHONGMING_STORE``, else
``<jupyter data dir>/chongming/tasks.db`` — the same default the kernels use
(``chongming_nb.stores.default_store_path``). Store calls block, so they run on a
small thread pool of their own, never on the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from chongming_nb.core.clock import Clock
from chongming_nb.core.state_machine import StateMachine
from chongming_nb.runtime.clock import SYSTEM_CLOCK
from chongming_nb.server.feed import Feed
from chongming_nb.server.liveness import KernelPids, Liveness
from chongming_nb.stores import default_store_path, open_store
from chongming_nb.stores.protocol import TaskStore

T = TypeVar("T")

SETTINGS_KEY = "chongming"


class ServerState:
    """What the handlers share: the store (opened on first use), the clock, the state
    machine whose ``can`` decides the buttons, the feed and the session lookup."""

    def __init__(
        self,
        store_url: str | None = None,
        *,
        store: TaskStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        sessions: Callable[[], Any] | None = None,
        kernel_pids: Callable[[], KernelPids] | None = None,
    ) -> None:
        self.store_url = store_url if store_url is not None else default_store_path()
        self._store = store
        self._store_lock = threading.Lock()
        self.clock = clock
        self.sm = StateMachine(clock)
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chongming-store")
        self._sessions = sessions
        self.liveness = Liveness(kernel_pids)
        self.feed = self._new_feed()

    def get_store(self) -> TaskStore:
        with self._store_lock:
            if self._store is None:
                self._store = open_store(self.store_url)
            return self._store

    def set_store(self, store: TaskStore) -> None:
        """Swap the store (tests); the feed starts over."""
        with self._store_lock:
            self._store = store
        self.feed = self._new_feed()

    def _new_feed(self) -> Feed:
        return Feed(
            self.get_store,
            self.run,
            gone=lambda snaps: set(self.liveness.gone(snaps, now=self.clock.now())),
        )

    async def run(self, fn: Callable[[], T]) -> T:
        """Run a blocking store call on the store threads."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def sessions(self) -> dict[str, str]:
        """kernel id -> session path (the notebook), from the server's session manager."""
        if self._sessions is None:
            return {}
        try:
            models = await self._sessions()
        except Exception:
            return {}
        out: dict[str, str] = {}
        for m in models:
            kernel = (m.get("kernel") or {}).get("id")
            path = m.get("path")
            if kernel and path:
                out[str(kernel)] = str(path)
        return out

    async def close(self) -> None:
        await self.feed.close()
        self.executor.shutdown(wait=False)
        with self._store_lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()
