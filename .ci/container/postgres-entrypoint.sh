#!/bin/sh
# Initialise the cluster on first start (like the official image's entrypoint), then run
# postgres as PID 1 under the postgres user, listening on every address with password auth.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  as_pg initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  # A private first start on the socket only, so nobody connects before the database exists.
  as_pg pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$db" != postgres ]; then
    as_pg psql -v ON_ERROR_STOP=1 -U "$user" -d postgres -c "CREATE DATABASE \"$db\"" >/dev/null
  fi
  as_pg pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "initialised database $db for user $user"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" \
  -c listen_addresses='*'
