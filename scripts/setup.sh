#!/usr/bin/env bash
# Install everything chongming_nb needs to run and to be tested, on a fresh Debian machine
# with Python >= 3.11 and Node 20. Idempotent: a second run with nothing changed takes a
# second or two, because each step leaves a stamp keyed on what it depends on.
#
#   Debian packages  chromium (browser tests), postgresql (store tests); `apt-get update`
#                    runs once, and only when something is missing
#   .venv            created with uv (uv itself is pip-installed when missing); the project
#                    is installed editable with the `dev` extra; stamp keyed on pyproject.toml
#   labextension     when labextension/package.json exists: scripts/build_labextension.sh,
#                    stamp keyed on the extension's sources
#
# Environment knobs:
#   CHONGMING_VENV=DIR       where the virtual environment lives (default: ./.venv)
#   CHONGMING_PYTHON=PATH    the interpreter to build the venv from (default: python3, >= 3.11)
#   CHONGMING_SKIP_APT=1     do not check or install Debian packages
#   CHONGMING_SKIP_LABEXTENSION=1  do not build the JupyterLab extension (Python-only work)
#   CHONGMING_FORCE_SETUP=1  ignore the stamps and redo every step
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${CHONGMING_VENV:-$ROOT/.venv}"
STAMPS="$VENV/.chongming-setup"
started_at=$SECONDS

log() { echo "[setup] $*" >&2; }
die() {
    echo "[setup] ERROR: $*" >&2
    exit 1
}

sha() { sha256sum | cut -c1-16; }

# Two setups at once (run.sh and test.sh, say) would race on the venv: take turns.
if command -v flock >/dev/null 2>&1; then
    lock="${TMPDIR:-/tmp}/chongming-setup-$(printf '%s' "$VENV" | sha).lock"
    exec 9>"$lock"
    flock 9
fi

# --- Debian packages ------------------------------------------------------------------
apt_missing=()
if [[ "${CHONGMING_SKIP_APT:-}" != 1 ]]; then
    [[ -x /usr/bin/chromium ]] || apt_missing+=(chromium)
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || apt_missing+=(postgresql)
fi
if ((${#apt_missing[@]})); then
    if [[ "$(id -u)" == 0 ]]; then
        sudo=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo=(sudo -n env DEBIAN_FRONTEND=noninteractive)
    else
        die "missing Debian packages: ${apt_missing[*]}; install them as root" \
            "(apt-get install -y ${apt_missing[*]}) or set CHONGMING_SKIP_APT=1"
    fi
    log "installing Debian packages: ${apt_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${apt_missing[@]}" >/dev/null
    [[ -x /usr/bin/chromium ]] || die "chromium is still missing after apt-get install"
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null ||
        die "PostgreSQL's initdb is still missing after apt-get install"
fi

# --- Python interpreter and uv ----------------------------------------------------------
pick_python() {
    local candidate
    for candidate in ${CHONGMING_PYTHON:-} python3 python3.11 python3.12 python3.13; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return
        fi
    done
    die "no Python >= 3.11 found (set CHONGMING_PYTHON=/path/to/python3.11)"
}
PY="$(pick_python)"

if command -v uv >/dev/null 2>&1 && uv --version >/dev/null 2>&1; then
    UV=(uv)
elif "$PY" -m uv --version >/dev/null 2>&1; then
    UV=("$PY" -m uv)
else
    log "installing uv with pip"
    "$PY" -m pip install --quiet --disable-pip-version-check uv
    UV=("$PY" -m uv)
fi
# uv must use the machine's interpreter, never download one
export UV_PYTHON_DOWNLOADS=never

# --- virtual environment and the project ------------------------------------------------
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    log "creating $VENV with $("$PY" --version 2>&1)"
    "${UV[@]}" venv --quiet --allow-existing --python "$PY" "$VENV"
fi
mkdir -p "$STAMPS"

py_key="$({
    cat pyproject.toml
    "$VENV/bin/python" -c 'import sys; print(sys.version)'
    echo "$ROOT"
} | sha)"
if [[ "${CHONGMING_FORCE_SETUP:-}" == 1 || ! -f "$STAMPS/python-$py_key" ]]; then
    log "installing chongming-nb (editable) with the dev extra into $VENV"
    "${UV[@]}" pip install --quiet --python "$VENV/bin/python" -e '.[dev]'
    rm -f "$STAMPS"/python-*
    touch "$STAMPS/python-$py_key"
fi

# --- JupyterLab extension ---------------------------------------------------------------
if [[ "${CHONGMING_SKIP_LABEXTENSION:-}" == 1 ]]; then
    log "JupyterLab extension build skipped (CHONGMING_SKIP_LABEXTENSION=1)"
elif [[ -f labextension/package.json ]]; then
    ext_key() {
        {
            find labextension \( -name node_modules -o -name lib -o -name .yarn \) -prune \
                -o -type f ! -name '*.tsbuildinfo' -print0 | sort -z | xargs -0 sha256sum
            echo "$py_key"
            cat scripts/build_labextension.sh
        } | sha
    }
    # where `jupyter labextension build` writes (package.json's jupyterlab.outputDir)
    ext_out="$("$VENV/bin/python" -c '
import json, pathlib
meta = json.loads(pathlib.Path("labextension/package.json").read_text())
print(pathlib.Path("labextension", meta.get("jupyterlab", {}).get("outputDir", "")))
')"
    if [[ "${CHONGMING_FORCE_SETUP:-}" == 1 || ! -f "$STAMPS/labextension-$(ext_key)" ||
        ! -f "$ext_out/package.json" || ! -f chongming_nb/notebook/static/widget.js ||
        ! -f chongming_nb/notebook/static/widget.css ]]; then
        log "building the JupyterLab extension (scripts/build_labextension.sh)"
        CHONGMING_VENV="$VENV" bash scripts/build_labextension.sh
        rm -f "$STAMPS"/labextension-*
        # keyed after the build, which may write a lockfile
        touch "$STAMPS/labextension-$(ext_key)"
    fi
fi

log "ready ($VENV) in $((SECONDS - started_at))s"
