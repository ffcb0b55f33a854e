#!/usr/bin/env bash
# A PostgreSQL server on 127.0.0.1:5432 with a `simlab` role and database, for the Optuna storage tests.
# Installs Debian's postgresql when no server is there, starts the cluster, and prints the URL to use.
set -euo pipefail
PORT=5432
URL="postgresql://simlab:simlab@127.0.0.1:${PORT}/simlab"

ready() { pg_isready -h 127.0.0.1 -p "$PORT" -q 2>/dev/null; }

if ! ready; then
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    echo "ensure-postgres: installing postgresql" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  fi
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$version main"; then
    pg_createcluster "$version" main >&2
  fi
  pg_ctlcluster "$version" main start >&2 || true
  for _ in $(seq 1 60); do ready && break; sleep 0.5; done
  ready || { echo "ensure-postgres: the server did not come up" >&2; exit 1; }
fi

as_postgres() { su postgres -c "$1"; }
as_postgres "psql -qtAc \"select 1 from pg_roles where rolname = 'simlab'\"" | grep -q 1 \
  || as_postgres "psql -qc \"create role simlab login password 'simlab'\"" >&2
as_postgres "psql -qtAc \"select 1 from pg_database where datname = 'simlab'\"" | grep -q 1 \
  || as_postgres "createdb -O simlab simlab" >&2
echo "$URL"
