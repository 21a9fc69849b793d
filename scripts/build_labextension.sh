#!/usr/bin/env bash
# Build the JupyterLab extension (labextension/) into chongming_nb/labextension/, offline
# after the first `jlpm install`, and make the venv's JupyterLab load it.
#
#   1. JS dependencies: `jlpm install` when node_modules is missing or older than
#      package.json / yarn.lock (the npm registry is only needed then).
#   2. Build: `tsc`, the notebook widget's bundle (`node build-widget.mjs`: esbuild writes
#      chongming_nb/notebook/static/widget.{js,css} from src/widget.ts, the shared row
#      module and style/row.css; a git-ignored build output, like the extension, which the
#      wheel ships) and `jupyter-builder build` (@jupyter/builder, rspack), skipped when
#      the stamp (a hash of labextension/src, style, package.json, yarn.lock, tsconfig,
#      .yarnrc.yml, build-widget.mjs and this script) matches the last successful build
#      and every output exists. CHONGMING_FORCE_LABEXTENSION=1 rebuilds anyway.
#   3. Editable installs: the wheel's data files (share/jupyter/labextensions/chongming-nb
#      and etc/jupyter/jupyter_server_config.d/chongming_nb.json) were copied into the venv
#      when it was installed, possibly before this build; the copy is refreshed whenever it
#      differs from chongming_nb/labextension. A copy, not a symlink: uninstalling the
#      package deletes the listed files, and through a symlink it would delete the build.
#
# Called by scripts/setup.sh; CHONGMING_VENV names the virtual environment (default
# ./.venv). Idempotent; exits non-zero on failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CHONGMING_VENV:-$ROOT/.venv}"
EXT="$ROOT/labextension"
OUT="$ROOT/chongming_nb/labextension"
STAMP="$EXT/node_modules/.chongming-build-stamp"
NAME="chongming-nb"
SERVER_CONFIG="$ROOT/chongming_nb/server/config/chongming_nb.json"
SELF="$ROOT/scripts/build_labextension.sh"
WIDGET="$ROOT/chongming_nb/notebook/static"

log() { echo "[labextension] $*" >&2; }

if [[ ! -f "$EXT/package.json" ]]; then
    log "no labextension/package.json: nothing to build"
    exit 0
fi
export PATH="$VENV/bin:$PATH"
command -v jlpm >/dev/null || {
    log "jlpm not found in $VENV/bin (is jupyterlab installed?)"
    exit 1
}

source_hash() {
    (
        cd "$EXT"
        find src style -type f -print0 | sort -z | xargs -0 sha256sum
        sha256sum package.json yarn.lock tsconfig.json .yarnrc.yml build-widget.mjs "$SELF"
    ) | sha256sum | cut -c1-32
}

# --- 1. dependencies ----------------------------------------------------------------------
cd "$EXT"
state="node_modules/.yarn-state.yml"
if [[ ! -f "$state" || package.json -nt "$state" || (-f yarn.lock && yarn.lock -nt "$state") ]]; then
    log "installing JS dependencies (jlpm install)"
    jlpm install
    touch "$state"
fi

# --- 2. build -----------------------------------------------------------------------------
hash="$(source_hash)"
if [[ "${CHONGMING_FORCE_LABEXTENSION:-}" != 1 && -f "$STAMP" && -f "$OUT/package.json" &&
    -f "$WIDGET/widget.js" && -f "$WIDGET/widget.css" && "$(cat "$STAMP")" == "$hash" ]]; then
    log "up to date ($hash)"
else
    log "building (tsc + widget bundle + jupyter-builder build)"
    jlpm run build:lib
    jlpm run build:widget
    jupyter-builder build . >&2
    for built in "$OUT/package.json" "$WIDGET/widget.js" "$WIDGET/widget.css"; do
        [[ -f "$built" ]] || {
            log "build produced no $built"
            exit 1
        }
    done
    echo "$hash" >"$STAMP"
    log "built into $OUT"
fi

# --- 3. editable install wiring -----------------------------------------------------------
prefix="$("$VENV/bin/python" -c 'import sys; print(sys.prefix)')"
pkg_dir="$("$VENV/bin/python" -c 'import chongming_nb, os; print(os.path.dirname(chongming_nb.__file__))' 2>/dev/null || true)"
if [[ "$pkg_dir" == "$ROOT/chongming_nb" ]]; then
    target="$prefix/share/jupyter/labextensions/$NAME"
    mkdir -p "$(dirname "$target")"
    if [[ -L "$target" ]] || ! diff -rq "$OUT" "$target" >/dev/null 2>&1; then
        rm -rf "$target"
        cp -R "$OUT" "$target"
        log "installed the build into $target"
    fi
    conf_dir="$prefix/etc/jupyter/jupyter_server_config.d"
    if [[ ! -f "$conf_dir/chongming_nb.json" ]]; then
        mkdir -p "$conf_dir"
        cp "$SERVER_CONFIG" "$conf_dir/chongming_nb.json"
        log "enabled the server extension ($conf_dir/chongming_nb.json)"
    fi
fi
