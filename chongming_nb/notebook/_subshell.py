"""Widget clicks reach the kernel while a cell runs: per-comm subshell routing.

JupyterLab >= 4.4 sends a widget's comm messages on a kernel subshell (setting
``commsOverSubshells``, default ``perCommTarget``), so a click can be handled while the
main shell runs a cell. ipykernel 7.x (verified on 7.4) then *replaces* that subshell id
for an incoming ``comm_msg`` with the subshell the comm last published from
(``ipykernel.comm.comm.BaseComm._reply_subshell_for``, called by
``Kernel.shell_channel_thread_main``). A comm whose last message went out from a cell or
a background thread has ``None`` there, so the click waits on the main shell behind the
running cell.

:func:`route_to_sender` wraps that method on one comm (ours only): when the stored
subshell is ``None``, the message goes to the subshell the front end sent it on. It
touches a private API, so it is applied only on the ipykernel versions it was checked
against (:data:`CHECKED_MAJOR`), only when the method is there, and
tests/notebook/test_nb_subshell.py runs it against the installed ipykernel's own comm
class. Elsewhere nothing is changed (the store command path still carries clicks for
controllers with a store).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("chongming_nb.notebook")

#: ipykernel major versions whose comm routing this was checked against.
CHECKED_MAJOR: tuple[int, ...] = (7,)

_ATTR = "_reply_subshell_for"


def _ipykernel_major() -> int | None:
    """The major version of the ipykernel this process runs, or None when ipykernel is
    not loaded: then no kernel delivers the comm's messages and there is nothing to
    route (importing it just to ask, ~0.13 s of CPU, landed on the first table a
    script or a test made outside a kernel)."""
    ipykernel = sys.modules.get("ipykernel")
    try:
        return int(ipykernel.version_info[0])  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError, IndexError):
        return None


def route_to_sender(comm: Any, *, major: int | None = None) -> bool:
    """Make ``comm`` deliver an incoming message to the subshell the front end sent it
    on whenever ipykernel would otherwise send it to the main shell (stored ``None``).
    Returns True if the comm was changed. Idempotent."""
    if comm is None:
        return False
    if (major if major is not None else _ipykernel_major()) not in CHECKED_MAJOR:
        return False
    original: Callable[[Any, Any], Any] | None = getattr(comm, _ATTR, None)
    if original is None or not callable(original):
        return False
    if getattr(original, "_chongming_routed", False):
        return True

    def route(data: Any, default: Any) -> Any:
        chosen = original(data, default)
        return default if chosen is None else chosen

    route._chongming_routed = True  # type: ignore[attr-defined]
    try:
        setattr(comm, _ATTR, route)
    except Exception:
        log.debug("could not route the widget comm by subshell", exc_info=True)
        return False
    return True
