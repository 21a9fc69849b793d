#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on 127.0.0.1, for tests and benchmarks.
#
#   scripts/pg_cluster.sh start DIR [DBNAME]   initdb into DIR, start on a free port, create
#                                              DBNAME (default chongming_test) and print its
#                                              URL (postgresql://...) on stdout, nothing else
#   scripts/pg_cluster.sh url DIR              print the URL of the cluster in DIR again
#   scripts/pg_cluster.sh stop DIR             stop the cluster and delete DIR
#
# DIR must not exist yet, or be empty. Typical use from another script:
#
#   pg_dir="$(mktemp -u -d "${TMPDIR:-/tmp}/chongming-pg.XXXXXX")"
#   trap 'scripts/pg_cluster.sh stop "$pg_dir"' EXIT
#   export CHONGMING_TEST_POSTGRES="$(scripts/pg_cluster.sh start "$pg_dir")"
#
# The server runs as the `postgres` user when invoked as root (root cannot run initdb), and
# as the invoking user otherwise. It listens only on 127.0.0.1 and on a Unix socket inside
# DIR; TCP logins need the random password written into the URL. It is tuned for speed
# (fsync off), never for durability: do not keep data in it.
set -euo pipefail

die() {
    echo "pg_cluster.sh: $*" >&2
    exit 2
}

pg_bindir() {
    local candidate best=""
    if [[ -n "${PG_BINDIR:-}" ]]; then
        [[ -x "$PG_BINDIR/initdb" ]] || die "PG_BINDIR=$PG_BINDIR has no initdb"
        echo "$PG_BINDIR"
        return
    fi
    # the newest major version installed by Debian's postgresql packages
    for candidate in /usr/lib/postgresql/*/bin; do
        [[ -x "$candidate/initdb" ]] && best="$candidate"
    done
    if [[ -z "$best" ]] && command -v initdb >/dev/null 2>&1; then
        best="$(dirname "$(command -v initdb)")"
    fi
    [[ -n "$best" ]] || die "no PostgreSQL server binaries found (apt-get install -y postgresql, or run scripts/setup.sh)"
    echo "$best"
}

# run a command as the cluster's owner
as_owner() {
    if [[ "$(id -u)" == 0 ]]; then
        id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' user to own the cluster"
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 - <<'EOF'
import socket

with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
EOF
}

cmd_start() {
    local dir="${1:-}" db="${2:-chongming_test}"
    [[ -n "$dir" ]] || die "usage: pg_cluster.sh start DIR [DBNAME]"
    [[ "$db" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "database name '$db' is not a plain identifier"
    if [[ -e "$dir" ]] && [[ -n "$(ls -A "$dir")" ]]; then
        die "$dir exists and is not empty; pass a new directory"
    fi
    local bindir port password
    bindir="$(pg_bindir)"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    chmod 700 "$dir"
    if [[ "$(id -u)" == 0 ]]; then
        id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' user to own the cluster"
        chown postgres: "$dir"
        runuser -u postgres -- test -w "$dir" ||
            die "the postgres user cannot reach $dir (a parent folder is private to root); use a new folder under /tmp, e.g. \$(mktemp -u -d /tmp/chongming-pg.XXXXXX)"
    fi
    password="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
    as_owner bash -c 'umask 077; printf "%s\n" "$1" >"$2/pwfile"' _ "$password" "$dir"
    as_owner "$bindir/initdb" --pgdata="$dir/data" --username=postgres --encoding=UTF8 \
        --locale=C --auth-local=trust --auth-host=scram-sha-256 --pwfile="$dir/pwfile" \
        --no-sync >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        die "initdb failed in $dir/data"
    }
    as_owner rm -f "$dir/pwfile"
    as_owner bash -c 'cat >>"$1/data/postgresql.conf"' _ "$dir" <<CONF

# throwaway cluster from scripts/pg_cluster.sh: loopback only, fast, not durable
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
shared_buffers = 64MB
CONF

    # a free port can be taken between the probe and the bind: try a few
    local attempt started=""
    for attempt in 1 2 3 4 5; do
        port="$(free_port)"
        if as_owner "$bindir/pg_ctl" --pgdata="$dir/data" --log="$dir/server.log" --wait \
            --timeout=60 \
            -o "-p $port" start >"$dir/pg_ctl.log" 2>&1; then
            started=1
            break
        fi
        echo "pg_cluster.sh: start on port $port failed (attempt $attempt), retrying" >&2
    done
    if [[ -z "$started" ]]; then
        cat "$dir/server.log" >&2 || true
        die "could not start PostgreSQL in $dir"
    fi
    as_owner "$bindir/createdb" --host="$dir" --port="$port" --username=postgres "$db"
    local url="postgresql://postgres:${password}@127.0.0.1:${port}/${db}"
    as_owner bash -c 'umask 077; printf "%s\n" "$1" >"$2/url"' _ "$url" "$dir"
    echo "$url"
}

cmd_url() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: pg_cluster.sh url DIR"
    [[ -f "$dir/url" ]] || die "no cluster URL in $dir (was it started with pg_cluster.sh start?)"
    cat "$dir/url"
}

cmd_stop() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: pg_cluster.sh stop DIR"
    [[ -e "$dir" ]] || return 0
    if [[ -f "$dir/data/postmaster.pid" ]]; then
        as_owner "$(pg_bindir)/pg_ctl" --pgdata="$dir/data" --mode=fast --wait --timeout=60 \
            stop >/dev/null 2>&1 || {
            # still there after a fast shutdown: end the postmaster of this cluster only
            local pid
            pid="$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)"
            if [[ "$pid" =~ ^[0-9]+$ ]]; then
                kill -9 "$pid" 2>/dev/null || true
            fi
        }
    fi
    # only ever delete a directory that this script laid out
    if [[ -d "$dir/data" || -f "$dir/initdb.log" ]]; then
        rm -rf "$dir"
    else
        die "$dir does not look like a pg_cluster.sh directory; not deleting it"
    fi
}

case "${1:-}" in
start) shift && cmd_start "$@" ;;
url) shift && cmd_url "$@" ;;
stop) shift && cmd_stop "$@" ;;
*) die "usage: pg_cluster.sh start DIR [DBNAME] | url DIR | stop DIR" ;;
esac
