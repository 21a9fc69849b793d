"""The Jupyter server extension: the REST API the JupyterLab Tasks sidebar talks to.

Enabled by the ``jupyter_server_config.d/chongming_nb.json`` file the wheel installs
(``{"ServerApp": {"jpserver_extensions": {"chongming_nb.server": true}}}``). Routes
live under ``<base_url>/chongming/api/`` (see ``handlers.ROUTES``, the one table).
"""

from __future__ import annotations

from typing import Any

from chongming_nb import __version__

__all__ = ["__version__"]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "chongming_nb.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from chongming_nb.server.extension import load

    load(serverapp)


# the name older jupyter_server / notebook versions look for
load_jupyter_server_extension = _load_jupyter_server_extension
