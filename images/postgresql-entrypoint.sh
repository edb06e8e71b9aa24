#!/bin/bash
# Entrypoint of the mlmodelscope/postgresql image (images/postgresql.Dockerfile): the official
# postgres image's variables, for a server that runs as its own non-root user on a read-only
# root filesystem.
#
#   POSTGRES_PASSWORD  the password of POSTGRES_USER; required to initialise an empty PGDATA
#   POSTGRES_USER      the superuser initdb creates (default postgres)
#   POSTGRES_DB        a database created for it (default: POSTGRES_USER)
#   PGDATA             the cluster's folder (default /var/lib/postgresql/data)
#   POSTGRES_INITDB_ARGS  more initdb arguments, split on spaces
#
# An empty PGDATA gets initdb (connections over TCP authenticate with scram-sha-256 and the
# password; the Unix socket, which only this pod reaches, trusts its users), then the
# database, created on a temporary server that listens on the socket alone. PGDATA with a
# cluster in it is started as it is. Either way the last step is `exec postgres` (listening on
# every address, port 5432): it is PID 1 and gets the container's signals. Arguments that
# begin with "-" are postgres options; any other command runs as given.
set -Eeuo pipefail

SOCKET_DIR=/var/run/postgresql

fail() {
  echo "postgresql-entrypoint: error: $*" >&2
  exit 1
}

if [ $# -eq 0 ] || [ "${1:0:1}" = "-" ]; then
  set -- postgres "$@"
fi
if [ "$1" != "postgres" ]; then
  exec "$@"
fi

PGDATA=${PGDATA:-/var/lib/postgresql/data}
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
export PGDATA

if [ "$(id -u)" = 0 ]; then
  fail "running as root, which PostgreSQL refuses: run as the image's postgres user, 999" \
    "(the image's USER; docker run --user 999:999, the chart's postgresql.podSecurityContext)"
fi
if [ ! -w "$SOCKET_DIR" ]; then
  fail "$SOCKET_DIR is not writable by UID $(id -u): mount a writable volume there (the" \
    "chart mounts an emptyDir) for the server's socket and its lock file"
fi
mkdir -p "$PGDATA" || fail "cannot create PGDATA $PGDATA: mount a volume writable by UID $(id -u)"
# A volume's fsGroup can open the folder to the group, which the server refuses.
chmod 0700 "$PGDATA" 2>/dev/null || true

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    fail "POSTGRES_PASSWORD is empty or not set: PGDATA $PGDATA holds no database yet, and its" \
      "user $POSTGRES_USER needs a password for connections over TCP (the chart passes the" \
      "password of the Secret <release>-mlmodelscope-postgresql)"
  fi
  echo "postgresql-entrypoint: initialising $PGDATA for user $POSTGRES_USER"
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of arguments
  initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" \
    --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 \
    --no-instructions ${POSTGRES_INITDB_ARGS:-}
  printf '\n# %s\nhost all all all scram-sha-256\n' \
    "mlmodelscope/postgresql: every other address, with the password" >>"$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != "postgres" ]; then
    pg_ctl --pgdata="$PGDATA" --wait --silent \
      --options="-c listen_addresses='' -c unix_socket_directories=$SOCKET_DIR" start
    # psql quotes the names (:"name"); a pipe, not a here-string: no temporary file.
    echo 'CREATE DATABASE :"db" OWNER :"owner";' | psql --no-psqlrc --quiet \
      --set=ON_ERROR_STOP=1 --host="$SOCKET_DIR" --username="$POSTGRES_USER" \
      --dbname=postgres --set=db="$POSTGRES_DB" --set=owner="$POSTGRES_USER"
    pg_ctl --pgdata="$PGDATA" --wait --silent --mode=fast stop
    echo "postgresql-entrypoint: created database $POSTGRES_DB"
  fi
fi

exec "$@"
