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
# (KUBECONFIG: the cluster's, kubernetes.sh's TB_KC_KUBECONFIG.)
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

# Images (scripts/testbed.d/*image.sh): each is tagged with the hash of what went into it, pushed
# to the local registry, and recorded with the digest the registry gave it in
# $TB_STATE/<record>.json, which tests and `serve` read (bin/testbed-image.ts).

# tb_image_cached REPO RECORD HASH: the recorded image was built from HASH and the registry still
# holds it; then the engine gets it too (a fresh data root may lack it).
tb_image_cached() {
  local repo=$1 record=$2 hash=$3
  [[ -f $TB_STATE/$record.json ]] && grep -q "\"sourceHash\": \"$hash\"" "$TB_STATE/$record.json" &&
    curl -fsS -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$TB_REGISTRY/v2/${repo#"$TB_REGISTRY"/}/manifests/$hash" || return 1
  docker image inspect "$repo:$hash" >/dev/null 2>&1 || docker pull -q "$repo:$hash" >/dev/null
}

# tb_push_image REPO RECORD HASH [FIELD=VALUE...]: push REPO:HASH and record its registry digest,
# its size and the extra string fields in $TB_STATE/RECORD.json.
tb_push_image() {
  local repo=$1 record=$2 hash=$3; shift 3
  docker push -q "$repo:$hash" >/dev/null
  local digest size extra="" field
  digest=$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$repo:$hash" | grep "^$repo@" | head -1)
  [[ $digest == *@sha256:* ]] || { tb_say "no registry digest for $repo:$hash"; return 1; }
  size=$(docker image inspect --format '{{.Size}}' "$repo:$hash")
  for field in "$@"; do extra+=$(printf ',\n  "%s": "%s"' "${field%%=*}" "${field#*=}"); done
  cat >"$TB_STATE/$record.json" <<JSON
{
  "repository": "$repo",
  "tag": "$hash",
  "sourceHash": "$hash",
  "image": "$digest",
  "digest": "${digest#*@}",
  "sizeBytes": $size$extra
}
JSON
  tb_say "${record%-image} image $digest ($((size / 1024 / 1024)) MiB)"
}

# tb_build_and_push_image REPO RECORD HASH CTX [FIELD=VALUE...]: build the Dockerfile in CTX as
# REPO:HASH (its output in $TB_LOG/RECORD.log), remove CTX, then tb_push_image.
tb_build_and_push_image() {
  local repo=$1 record=$2 hash=$3 ctx=$4; shift 4
  docker build -q -t "$repo:$hash" "$ctx" >"$TB_LOG/$record.log" 2>&1 \
    || { tail -20 "$TB_LOG/$record.log" >&2; return 1; }
  rm -rf "$ctx"
  tb_push_image "$repo" "$record" "$hash" "$@"
}

# tb_image_status_line LABEL RECORD PART: one `testbed status` line for the image recorded as RECORD.
tb_image_status_line() {
  local f=$TB_STATE/$2.json size
  if [[ -f $f ]]; then
    size=$(grep '"sizeBytes"' "$f" | tr -dc 0-9)
    printf '%-9s %s (%s MiB, %s)\n' "$1" "$(grep '"image"' "$f" | cut -d'"' -f4)" "$((${size:-0} / 1024 / 1024))" "$f"
  else printf '%-9s not built (scripts/testbed up %s)\n' "$1" "$3"; fi
}

# A runtime's image holds /app laid out like the repository (runtimes/<name>/, runtimes/kit/,
# contracts/; runtimes/README.md): the paths its catalogue row and its code name.
# tb_runtime_sources RUNTIME: those source files (no tests), one a line, sorted.
tb_runtime_sources() {
  (cd "$TB_REPO" && find "runtimes/$1" runtimes/kit contracts -type f \( -name '*.ts' -o -name '*.py' \) ! -name '*.test.ts' | LC_ALL=C sort)
}

# tb_runtime_sources_hash RUNTIME: what a rebuild of the runtime's /app depends on (its sources, zod).
tb_runtime_sources_hash() {
  (cd "$TB_REPO" && tb_runtime_sources "$1" | xargs sha256sum && cat node_modules/zod/package.json)
}

# tb_runtime_image_hash RUNTIME VERSIONS...: the tag of a runtime image built FROM the base image:
# a rebuild when its recipe (scripts/testbed.d/RUNTIME-image.sh), its /app, the base image or the
# versions of what it installs change.
tb_runtime_image_hash() {
  local runtime=$1; shift
  {
    cat "$TB_REPO/scripts/testbed.d/$runtime-image.sh"
    tb_runtime_sources_hash "$runtime"
    grep '"digest"' "$TB_STATE/base-image.json"
    echo "$*"
  } | sha256sum | cut -c1-16
}

# tb_runtime_app RUNTIME DIR: the runtime's /app in DIR (its sources, zod, an ESM package.json).
tb_runtime_app() {
  mkdir -p "$2/node_modules"
  (cd "$TB_REPO" && tb_runtime_sources "$1" | tr '\n' '\0' | xargs -0 cp --parents -t "$2")
  cp -r "$TB_REPO/node_modules/zod" "$2/node_modules/zod"
  printf '{"type":"module","private":true}\n' >"$2/package.json"
}
