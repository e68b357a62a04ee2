#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on loopback for the shared-storage tests (tests/conftest.py runs it when
# Debian's postgresql package is installed, as .ci/run does). Each pytest-xdist worker starts its own server, so
# the port is a free one chosen here (or $AUTOTUNE_PG_PORT), tried again on another port if taken meanwhile.
# Prints the URL and the data folder; stop it with: pg_ctl -D DATA stop. On failure prints the server's log.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
data=$(mktemp -d /tmp/autotune-pg.XXXXXX)
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
[ "$(id -u)" = 0 ] && chown postgres "$data"
as_postgres "$bin/initdb" -D "$data" -A trust -U autotune >/dev/null
for attempt in 1 2 3; do
  port=${AUTOTUNE_PG_PORT:-$(free_port)}
  if as_postgres "$bin/pg_ctl" -D "$data" -l "$data/log" -w -o "-h 127.0.0.1 -p $port -k $data" start >/dev/null; then
    echo "postgresql://autotune@127.0.0.1:$port/postgres $data"
    exit 0
  fi
done
echo "server log ($data/log):" >&2
tail -n 20 "$data/log" >&2
exit 1
