#!/usr/bin/env bash
# A throwaway PostgreSQL server for the bank's tests and benchmarks.
#
#   scripts/postgres.sh                 # install if needed, start, print the URL on stdout
#   scripts/postgres.sh --if-available  # same, but print nothing (exit 0) when PostgreSQL is not
#                                       # installed and CI is not "true" (local runs may skip)
#   scripts/postgres.sh --stop          # stop the server
#
# Installs PostgreSQL from Debian's packages when missing (apt-get update once, then
# apt-get install -y postgresql; needs root), creates a cluster under $MERKAT_PG_DIR
# (default /tmp/merkat-pg) listening on 127.0.0.1:$MERKAT_PG_PORT (default 55432) only, with
# trust authentication for loopback, creates the database merkat_test and prints
#   postgresql://postgres@127.0.0.1:55432/merkat_test
# Logs go to stderr. Safe to call repeatedly: a running server is reused.
set -euo pipefail

DIR=${MERKAT_PG_DIR:-/tmp/merkat-pg}
PORT=${MERKAT_PG_PORT:-55432}
DB=merkat_test
MODE=${1:-start}
log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  command -v initdb >/dev/null 2>&1 && { dirname "$(readlink -f "$(command -v initdb)")"; return 0; }
  return 1
}

BINDIR=$(find_bindir || true)
if [ -z "$BINDIR" ]; then
  if [ "$MODE" = "--if-available" ] && [ "${CI:-}" != "true" ]; then
    log "PostgreSQL is not installed; PostgreSQL tests will be skipped"
    exit 0
  fi
  [ "$(id -u)" = 0 ] || { log "PostgreSQL is missing and installing it needs root"; exit 1; }
  log "installing PostgreSQL from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2
  apt-get install -y postgresql >&2
  BINDIR=$(find_bindir) || { log "initdb not found after installing postgresql"; exit 1; }
fi

# Run the server as the 'postgres' user when we are root (initdb refuses root).
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$DIR" postgres
  as_pg() { runuser -u postgres -- "$@"; }
  OWNER=postgres
else
  as_pg() { "$@"; }
  OWNER=$(id -un)
fi

if [ "$MODE" = "--stop" ]; then
  [ -f "$DIR/data/PG_VERSION" ] && as_pg "$BINDIR/pg_ctl" -D "$DIR/data" -m fast stop >&2 || true
  exit 0
fi

mkdir -p "$DIR"
chown "$OWNER" "$DIR"
if [ ! -f "$DIR/data/PG_VERSION" ]; then
  log "creating a cluster in $DIR/data"
  as_pg "$BINDIR/initdb" -D "$DIR/data" -U postgres --auth=trust --encoding=UTF8 --no-locale >&2
fi
if ! as_pg "$BINDIR/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
  log "starting on 127.0.0.1:$PORT"
  as_pg "$BINDIR/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c max_connections=200 -c fsync=on" start >&2 \
    || { log "the server did not start; see $DIR/server.log"; tail -20 "$DIR/server.log" >&2 || true; exit 1; }
fi
if ! as_pg "$BINDIR/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
  as_pg "$BINDIR/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB" >&2
fi
echo "postgresql://postgres@127.0.0.1:$PORT/$DB"
