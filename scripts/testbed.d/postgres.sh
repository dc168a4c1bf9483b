# shellcheck shell=bash
# PostgreSQL for the tests (issue 20): Debian's server, its own cluster under $TB_HOME/postgres
# (initdb'd here, never Debian's /var/lib/postgresql cluster), run as the `postgres` OS user,
# listening on 127.0.0.1:$TB_PG_PORT only (TCP, scram-sha-256) and on a socket in our own run
# directory (peer auth, for the setup below). It holds one role and one database for the tests:
# `scripts/testbed env` prints AGENT_SESSIONS_TESTBED_DATABASE_URL for them. The role may create
# databases, so a test wanting a whole server's database makes its own (test/support/store).
TB_PG_HOME=$TB_HOME/postgres
TB_PG_DATA=$TB_PG_HOME/data
TB_PG_SOCKET_DIR=$TB_RUN/postgres
TB_PG_PORT=5433
TB_PG_ROLE=agent_sessions_test
TB_PG_DB=agent_sessions_test
TB_PG_PASSWORD_FILE=$TB_PG_HOME/password
# Written by the server itself (the postgres user), so in its own directory, not $TB_LOG.
TB_PG_LOG=$TB_PG_HOME/server.log

# The newest server Debian installed (bookworm: 15).
_tb_pg_bin() {
  local initdb
  initdb=$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1)
  [[ -n $initdb ]] && dirname "$initdb"
}

_tb_pg_as_postgres() { runuser -u postgres -- "$@"; }

_tb_pg_ready() { "$(_tb_pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$TB_PG_PORT"; }

# The URL of the tests' database, password included (only `env` prints it).
tb_pg_url() {
  [[ -s $TB_PG_PASSWORD_FILE ]] || return 1
  printf 'postgres://%s:%s@127.0.0.1:%s/%s' "$TB_PG_ROLE" "$(cat "$TB_PG_PASSWORD_FILE")" "$TB_PG_PORT" "$TB_PG_DB"
}

tb_postgres_up() {
  # Debian's maintainer scripts may create and start a `15/main` cluster on 5432; ours is apart.
  [[ -n $(_tb_pg_bin) ]] || tb_apt_install postgresql
  local bin; bin=$(_tb_pg_bin)
  [[ -n $bin ]] || { tb_say "postgres: no initdb under /usr/lib/postgresql after installing postgresql"; return 1; }
  id postgres >/dev/null 2>&1 || { tb_say "postgres: Debian's package made no 'postgres' user"; return 1; }
  mkdir -p "$TB_PG_HOME" "$TB_PG_SOCKET_DIR"
  chown postgres:postgres "$TB_PG_HOME" "$TB_PG_SOCKET_DIR"
  chmod 700 "$TB_PG_HOME" "$TB_PG_SOCKET_DIR"
  [[ -s $TB_PG_PASSWORD_FILE ]] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$TB_PG_PASSWORD_FILE")
  if [[ ! -f $TB_PG_DATA/PG_VERSION ]]; then
    rm -rf "$TB_PG_DATA"
    _tb_pg_as_postgres "$bin/initdb" -D "$TB_PG_DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
      --auth-local=peer --auth-host=scram-sha-256 >"$TB_LOG/postgres-initdb.log" 2>&1 \
      || { tail -20 "$TB_LOG/postgres-initdb.log" >&2; return 1; }
  fi
  if ! { tb_pid_alive postgres && _tb_pg_ready; }; then
    if ss -ltn "sport = :$TB_PG_PORT" | grep -q LISTEN; then
      tb_say "postgres: 127.0.0.1:$TB_PG_PORT is taken by a process that is not ours"; return 1
    fi
    # fd 9 (the test bed's lock) must not stay open in the daemon.
    _tb_pg_as_postgres "$bin/pg_ctl" -D "$TB_PG_DATA" -l "$TB_PG_LOG" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $TB_PG_PORT -k $TB_PG_SOCKET_DIR -c max_connections=200" \
      start >/dev/null 9>&- || { tail -20 "$TB_PG_LOG" >&2; return 1; }
    head -1 "$TB_PG_DATA/postmaster.pid" >"$TB_RUN/postgres.pid"
    tb_wait_for "postgres" 30 _tb_pg_ready || { tail -20 "$TB_PG_LOG" >&2; return 1; }
  fi
  # The tests' role and database (idempotent: the password follows the file).
  local password; password=$(cat "$TB_PG_PASSWORD_FILE")
  # The password goes in on stdin, never on a command line another process could read.
  { printf '\\set password %s\n' "$password"; cat <<'SQL'; } |
SELECT format('CREATE ROLE %I LOGIN', :'role') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I LOGIN CREATEDB PASSWORD %L', :'role', :'password') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'role') WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL
    _tb_pg_as_postgres psql -q -h "$TB_PG_SOCKET_DIR" -p "$TB_PG_PORT" -d postgres -v ON_ERROR_STOP=1 \
      -v role="$TB_PG_ROLE" -v db="$TB_PG_DB" >"$TB_LOG/postgres-setup.log" 2>&1 \
    || { tail -20 "$TB_LOG/postgres-setup.log" >&2; return 1; }
  cat >"$TB_STATE/postgres.json" <<JSON
{
  "version": "$("$bin/postgres" --version | awk '{print $3}')",
  "host": "127.0.0.1",
  "port": $TB_PG_PORT,
  "database": "$TB_PG_DB",
  "role": "$TB_PG_ROLE",
  "passwordFile": "$TB_PG_PASSWORD_FILE",
  "data": "$TB_PG_DATA"
}
JSON
}

tb_postgres_down() {
  local f=$TB_RUN/postgres.pid pid
  if [[ -f $f ]] && pid=$(cat "$f") && kill -0 "$pid" 2>/dev/null; then
    # SIGINT: PostgreSQL's fast shutdown (ends client sessions, checkpoints); SIGTERM would wait for clients.
    tb_say "stopping postgres (pid $pid)"
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  tb_stop_pid postgres
}

tb_postgres_status() {
  if tb_pid_alive postgres && _tb_pg_ready; then
    echo "postgres  running (pid $(cat "$TB_RUN/postgres.pid")) at 127.0.0.1:$TB_PG_PORT, database $TB_PG_DB (role $TB_PG_ROLE), data $TB_PG_DATA"
  else echo "postgres  not running (scripts/testbed up postgres)"; fi
}
