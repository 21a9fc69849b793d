#!/usr/bin/env bash
# Install the JupyterLab extension's JS dependencies and build it into the Python package.
#
# Owned by the labextension engineer; this first version is the plumbing's placeholder.
# Called by scripts/setup.sh whenever labextension/package.json exists and the extension's
# sources (or this script) changed since the last successful build; CHONGMING_VENV names the
# virtual environment to use (its bin/ has jupyter and jlpm). Must exit non-zero on failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CHONGMING_VENV:-$ROOT/.venv}"

if [[ ! -f "$ROOT/labextension/package.json" ]]; then
    echo "[labextension] no labextension/package.json yet: nothing to build" >&2
    exit 0
fi

export PATH="$VENV/bin:$PATH"
cd "$ROOT/labextension"
echo "[labextension] installing JS dependencies (jlpm install)" >&2
jlpm install
echo "[labextension] building (jlpm build)" >&2
jlpm build
