# shellcheck shell=bash
# Shared paths and helpers for scripts/testbed. Sourced, never run.
#
# Everything the test bed installs, builds or runs lives under one directory outside the clone,
# so CI on the same machine reuses it: $AGENT_SESSIONS_TESTBED_HOME (default /var/cache/agent-sessions-testbed).

set -euo pipefail

TB_HOME=${AGENT_SESSIONS_TESTBED_HOME:-/var/cache/agent-sessions-testbed}
TB_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TB_BIN=$TB_HOME/bin            # our own binaries (node, pulumi, kubectl, docker client wrappers)
TB_RUN=$TB_HOME/run            # pid files, sockets, logs of running daemons
TB_LOG=$TB_HOME/log
TB_SRC=$TB_HOME/src            # downloaded sources and Go workspaces
TB_STATE=$TB_HOME/state        # what is installed: one stamp file a part
mkdir -p "$TB_BIN" "$TB_RUN" "$TB_LOG" "$TB_SRC" "$TB_STATE"

# Where clients reach the engines. Printed by `testbed env` for `eval`.
export DOCKER_HOST=unix://$TB_RUN/docker.sock
export PULUMI_HOME=$TB_HOME/pulumi-home
export KUBECONFIG=$TB_HOME/kubernetes/admin.kubeconfig
export TB_REGISTRY=127.0.0.1:5000
export PULUMI_SKIP_UPDATE_CHECK=1
export GOPATH=${TB_GOPATH:-$TB_HOME/gopath}
export GOCACHE=$TB_HOME/gocache
export GOMODCACHE=$TB_HOME/gomodcache
export PATH=$TB_BIN:$PULUMI_HOME/bin:$PATH

tb_now() { date +%s.%N; }
tb_say() { printf '[testbed %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# tb_step NAME CMD...: run a step, print its wall time.
tb_step() {
  local name=$1; shift
  local t0; t0=$(tb_now)
  tb_say "$name ..."
  "$@"
  tb_say "$name done in $(awk -v a="$t0" -v b="$(tb_now)" 'BEGIN{printf "%.1fs", b-a}')"
}
# Daemon helpers: a daemon is a pid file under $TB_RUN; we only ever signal PIDs we started.
tb_pid_alive() { local f=$TB_RUN/$1.pid; [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null; }
tb_stop_pid() {
  local name=$1 f=$TB_RUN/$1.pid pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    tb_say "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}
# tb_wait_for DESC SECONDS CMD...: poll until CMD succeeds.
tb_wait_for() {
  local desc=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= end)); then tb_say "timed out waiting for $desc"; return 1; fi
    sleep 0.2
  done
}
tb_apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  ((${#missing[@]} == 0)) && return 0
  tb_say "apt-get install ${missing[*]}"
  # policy-rc.d keeps Debian's maintainer scripts from starting daemons we start ourselves.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends "${missing[@]}" >"$TB_LOG/apt.log" 2>&1 \
    || { apt-get update -q >>"$TB_LOG/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$TB_LOG/apt.log" 2>&1; } \
    || { tail -20 "$TB_LOG/apt.log" >&2; return 1; }
}
