"""Loading the server extension: its routes (``handlers``) and the state it shares
between requests (``state.ServerState``)."""

from __future__ import annotations

from typing import Any

from chongming_nb.server.liveness import kernel_pids_of
from chongming_nb.server.state import SETTINGS_KEY, ServerState

__all__ = ["SETTINGS_KEY", "ServerState", "load"]


def load(serverapp: Any) -> None:
    """Register the routes and the shared state with a running Jupyter server."""
    from chongming_nb.server.handlers import route_table

    session_manager = getattr(serverapp, "session_manager", None)
    sessions = session_manager.list_sessions if session_manager is not None else None
    kernel_manager = getattr(serverapp, "kernel_manager", None)
    pids = kernel_pids_of(kernel_manager) if kernel_manager is not None else None
    state = ServerState(sessions=sessions, kernel_pids=pids)
    web_app = serverapp.web_app
    web_app.settings[SETTINGS_KEY] = state
    base_url = web_app.settings.get("base_url", "/")
    web_app.add_handlers(".*$", route_table(base_url))
    serverapp.log.info("chongming_nb server extension: store %s", state.store_url)
