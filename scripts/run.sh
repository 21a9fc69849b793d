#!/usr/bin/env bash
# Open JupyterLab on notebooks/, with chongming_nb and its extension installed.
#
#   ./scripts/run.sh                 setup, then JupyterLab on http://127.0.0.1:8888
#   ./scripts/run.sh --port=9999     any extra arguments go to `jupyter lab`
#
# Notebooks get the default controller (cn.get_controller()): embedded SQLite store, thread
# executor. Environment knobs: CHONGMING_PORT (default 8888; the next free port is taken when
# it is busy), CHONGMING_TOKEN (default: a random token, printed in the URL).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${CHONGMING_VENV:-$ROOT/.venv}"

# Chromium and PostgreSQL are for the tests only: opening JupyterLab needs no root and no apt
CHONGMING_SKIP_APT=1 bash scripts/setup.sh
mkdir -p notebooks

port="$(
    "$VENV/bin/python" - "${CHONGMING_PORT:-8888}" <<'EOF'
import socket
import sys

start = int(sys.argv[1])
for port in range(start, start + 50):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break
else:
    sys.exit(f"no free port in {start}..{start + 49}")
EOF
)"
token="${CHONGMING_TOKEN:-$("$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(24))')}"

args=(
    --ServerApp.ip=127.0.0.1
    --ServerApp.port="$port"
    --ServerApp.port_retries=0
    --ServerApp.root_dir="$ROOT/notebooks"
    --IdentityProvider.token="$token"
)
[[ -n "${DISPLAY:-}" ]] || args+=(--no-browser)
[[ "$(id -u)" != 0 ]] || args+=(--allow-root)

echo
echo "    JupyterLab on notebooks/:  http://127.0.0.1:$port/lab?token=$token"
echo "    (Ctrl-C twice to stop)"
echo
exec "$VENV/bin/jupyter" lab "${args[@]}" "$@"
