"""Tasks whose kernel restarted or died, from the server's view (server/liveness.py):
the row says "kernel gone" with the reason and allows no verb, a command is refused at
once (nothing would ever claim it), and the feed reports the change without any write
to the store. Real Jupyter server, real kernels, real processes."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from helpers_server import put_task
from tornado.httpclient import HTTPClientError

from chongming_nb.core.states import TaskStatus
from chongming_nb.server.extension import SETTINGS_KEY
from chongming_nb.server.liveness import KernelView, Liveness, owner_gone

S = TaskStatus
API = ("chongming", "api")
HOST = socket.gethostname()


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(30)
    return p.pid


async def refused(jp_fetch: Any, task_id: str, verb: str) -> str:
    """POST a verb that must be refused at once (409, nothing queued); its message."""
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(
            *API, "tasks", task_id, "commands", method="POST", body=json.dumps({"verb": verb})
        )
    assert info.value.code == 409
    return str(json.loads(info.value.response.body)["message"])  # type: ignore[union-attr]


async def dead_and_live(
    jp_fetch: Any, store: Any, status: TaskStatus, dead: str, live: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Put a task of a dead kernel and one of a live one in ``status``; their rows."""
    put_task(store, dead, status, owner=f"{HOST}:{dead_pid()}:kernel-x")
    put_task(store, live, status, owner=f"{HOST}:{os.getpid()}:kernel-y")
    got = await rows(jp_fetch)
    return got[dead], got[live]


async def rows(jp_fetch: Any) -> dict[str, Any]:
    r = await jp_fetch(*API, "tasks")
    return {t["id"]: t for t in json.loads(r.body)["tasks"]}


def test_owner_gone_rules() -> None:
    now = datetime.now(UTC)
    me = f"{HOST}:{os.getpid()}:k1"
    assert not owner_gone(me, lease_until=None, now=now).gone
    alive = {"k1": KernelView(os.getpid())}
    assert not owner_gone(me, lease_until=None, now=now, kernels=alive).gone
    moved = {"k1": KernelView(os.getpid() + 1)}
    restarted = owner_gone(me, lease_until=None, now=now, kernels=moved)
    assert restarted.gone and "kernel k1 restarted" in restarted.reason
    # asked to restart or shut down, the old process still exiting: gone already
    stopping = {"k1": KernelView(os.getpid(), stopping=True)}
    going = owner_gone(me, lease_until=None, now=now, kernels=stopping)
    assert going.gone and "restarting or shutting down" in going.reason
    died = owner_gone(f"{HOST}:{dead_pid()}:k2", lease_until=None, now=now, kernels={})
    assert died.gone and "kernel k2 is gone" in died.reason and "not running" in died.reason
    # another host, no lease: cannot be proven gone
    assert not owner_gone("elsewhere:1:k3", lease_until=None, now=now).gone


def test_liveness_asks_once_per_owner_and_skips_finished_tasks_when_told(kernel_store: Any) -> None:
    owner = f"{HOST}:{dead_pid()}:k9"
    a = put_task(kernel_store, "a", S.RUNNING, owner=owner)
    b = put_task(kernel_store, "b", S.PAUSED, owner=owner)
    c = put_task(kernel_store, "c", S.SUCCEEDED, owner=owner)
    calls: list[int] = []

    def pids() -> dict[str, KernelView]:
        calls.append(1)
        return {}

    live = Liveness(pids)
    assert set(live.gone([a, b, c], now=datetime.now(UTC), finished=False)) == {"a", "b"}
    assert calls == [1]
    # a finished task's owner is judged too (no retry can be claimed), by the owner alone
    assert set(live.gone([a, b, c], now=datetime.now(UTC))) == {"a", "b", "c"}


async def test_a_dead_owners_tasks_read_kernel_gone_and_refuse_verbs_at_once(
    jp_fetch: Any, kernel_store: Any
) -> None:
    dead, live = await dead_and_live(jp_fetch, kernel_store, S.RUNNING, "t-dead", "t-live")
    assert dead["kernel_gone"] is True and "kernel kernel-x is gone" in dead["kernel_gone_reason"]
    assert not any(dead["can"].values())
    assert "the kernel that runs it is gone" in dead["why"]["stop"]
    assert live["kernel_gone"] is False and live["can"]["stop"] is True
    assert "the kernel that runs it is gone" in await refused(jp_fetch, "t-dead", "stop")
    assert kernel_store.claim_commands(owner="anyone", now=datetime.now(UTC), lease_seconds=5) == []
    detail = json.loads((await jp_fetch(*API, "tasks", "t-dead")).body)
    assert detail["task"]["kernel_gone"] is True


async def test_a_finished_task_of_a_dead_kernel_offers_no_retry_and_says_why(
    jp_fetch: Any, kernel_store: Any
) -> None:
    """Its code lived in that kernel: no controller holds it, nothing would claim a retry."""
    ended, mine = await dead_and_live(jp_fetch, kernel_store, S.FAILED, "t-ended", "t-mine")
    assert ended["status"] == "failed" and ended["kernel_gone"] is False  # it says how it ended
    assert ended["can"]["retry"] is False
    assert "no controller holds its code" in ended["why"]["retry"]
    assert "kernel kernel-x is gone" in ended["why"]["retry"]
    assert mine["can"]["retry"] is True
    assert "no controller holds its code" in await refused(jp_fetch, "t-ended", "retry")
    assert kernel_store.claim_commands(owner="anyone", now=datetime.now(UTC), lease_seconds=5) == []


async def test_a_kernel_restart_reaches_the_feed_without_a_store_write(
    jp_fetch: Any, jp_web_app: Any, kernel_store: Any
) -> None:
    r = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
    kid = json.loads(r.body)["id"]
    try:
        info = await jp_fetch("api", "kernels", kid)
        assert json.loads(info.body)["id"] == kid
        # the pid the kernel's controller records in its owner id
        pid = jp_web_app.settings[SETTINGS_KEY].liveness.kernels()[kid].pid
        assert isinstance(pid, int)
        put_task(kernel_store, "t-k", S.RUNNING, owner=f"{HOST}:{pid}:{kid}")
        assert (await rows(jp_fetch))["t-k"]["kernel_gone"] is False
        first = json.loads(
            (await jp_fetch(*API, "feed", params={"since": "0", "timeout": "0"})).body
        )
        cursor = first["cursor"]
        waiting = asyncio.ensure_future(
            jp_fetch(*API, "feed", params={"since": str(cursor), "timeout": "20"})
        )
        await jp_fetch("api", "kernels", kid, "restart", method="POST", body="{}")
        answer = json.loads((await waiting).body)
        (row,) = [t for t in answer["tasks"] if t["id"] == "t-k"]
        assert row["kernel_gone"] is True and row["status"] == "running"
        assert f"kernel {kid}" in row["kernel_gone_reason"]
        assert not any(row["can"].values())
    finally:
        await jp_fetch("api", "kernels", kid, method="DELETE")
