#!/usr/bin/env bash
# Run every quality gate and every test, after installing whatever is missing.
#
#   ./scripts/test.sh                  setup, ruff, ruff format --check, mypy, lint-imports,
#                                      then pytest over tests/
#   ./scripts/test.sh tests/x -x -q    same gates, then pytest with these arguments instead
#
# A throwaway PostgreSQL cluster on 127.0.0.1 runs for the duration (scripts/pg_cluster.sh)
# and its URL is exported as CHONGMING_TEST_POSTGRES, unless that variable is already set.
# Exit code: pytest's (5, no test collected, counts as a failure), or 1 when pytest passed
# but a gate failed. pytest's summary is the last line printed.
#
# Environment knobs:
#   CHONGMING_SKIP_GATES=1   skip ruff/mypy/lint-imports (quick local runs; never in CI)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${CHONGMING_VENV:-$ROOT/.venv}"

bash scripts/setup.sh
export PATH="$VENV/bin:$PATH"

# --- quality gates ---------------------------------------------------------------------------
failed_gates=()
gate() {
    local name="$1"
    shift
    echo "=== $name: $*"
    if ! "$@"; then
        failed_gates+=("$name")
        echo "=== $name FAILED"
    fi
}
if [[ "${CHONGMING_SKIP_GATES:-}" == 1 && "${CI:-}" != true ]]; then
    echo "=== quality gates skipped (CHONGMING_SKIP_GATES=1)"
else
    gate "ruff check" ruff check .
    gate "ruff format" ruff format --check .
    gate "mypy" mypy
    gate "import contracts" lint-imports --no-cache
fi

# --- services the tests need -----------------------------------------------------------------
pg_dir=""
cleanup() {
    if [[ -n "$pg_dir" ]]; then
        bash "$ROOT/scripts/pg_cluster.sh" stop "$pg_dir" || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [[ -z "${CHONGMING_TEST_POSTGRES:-}" ]]; then
    pg_dir="$(mktemp -u -d "${TMPDIR:-/tmp}/chongming-pg.XXXXXX")"
    CHONGMING_TEST_POSTGRES="$(bash scripts/pg_cluster.sh start "$pg_dir")"
    export CHONGMING_TEST_POSTGRES
    echo "=== PostgreSQL: throwaway cluster on ${CHONGMING_TEST_POSTGRES##*@}"
else
    echo "=== PostgreSQL: using the given CHONGMING_TEST_POSTGRES (${CHONGMING_TEST_POSTGRES##*@})"
fi

# --- tests -----------------------------------------------------------------------------------
if ((${#failed_gates[@]})); then
    echo "=== quality gates FAILED: ${failed_gates[*]} (running the tests anyway)"
else
    echo "=== quality gates passed"
fi
pytest_args=("$@")
if ((${#pytest_args[@]} == 0)); then
    pytest_args=(tests -ra)
fi
set +e
python -m pytest "${pytest_args[@]}"
rc=$?
set -e
# rc 5 (no test collected) is non-zero, so it fails the run as it should
if ((rc == 0 && ${#failed_gates[@]})); then
    exit 1
fi
exit "$rc"
