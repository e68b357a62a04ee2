#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on loopback for the shared-storage tuner test (tests/conftest.py runs it
# when Debian's postgresql package is installed, as .ci/run does). Prints the URL and the data folder; stop it
# with: pg_ctl -D DATA stop.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
data=$(mktemp -d /tmp/autotune-pg.XXXXXX)
port=${AUTOTUNE_PG_PORT:-54329}
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$data"
as_postgres "$bin/initdb" -D "$data" -A trust -U autotune >/dev/null
as_postgres "$bin/pg_ctl" -D "$data" -l "$data/log" -w -o "-h 127.0.0.1 -p $port -k $data" start >/dev/null
echo "postgresql://autotune@127.0.0.1:$port/postgres $data"
