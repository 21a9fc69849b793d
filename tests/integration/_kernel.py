"""Run a cell in a real kernel and read what it printed (integration tests' helper)."""

from __future__ import annotations

from typing import Any

from jupyter_client.manager import KernelManager


def run_cell(km: KernelManager, cell: str) -> str:
    """Run ``cell`` in the started kernel ``km``; its stdout. The cell must succeed (an
    error fails the test with its traceback)."""
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        out: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
            if msg["msg_type"] == "error":
                out.append("\n".join(msg["content"]["traceback"]))

        reply = kc.execute_interactive(cell, timeout=120, output_hook=hook)
        assert reply["content"]["status"] == "ok", out
    finally:
        kc.stop_channels()
    return "".join(out)
