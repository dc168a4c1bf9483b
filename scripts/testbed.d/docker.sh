# shellcheck shell=bash
# Debian docker.io's dockerd on our own socket, data root and bridge, plus Debian's
# docker-registry on 127.0.0.1:5000 for real content digests (TESTBED.md "Docker engine").
TB_DOCKER_ROOT=$TB_HOME/docker
TB_BRIDGE=asbr0                     # our bridge; dockerd gets it with --bridge
TB_BRIDGE_CIDR=10.213.0.1/24
TB_REGISTRY_ROOT=$TB_HOME/registry

tb_docker_install() {
  tb_apt_install docker.io docker-registry busybox-static iptables
  # Debian's client, not the other build earlier on the image's PATH.
  ln -sf /usr/bin/docker "$TB_BIN/docker"
  # root here lacks CAP_SYS_RESOURCE: runc cannot set the negative oom_score_adj the kubelet asks
  # for. This wrapper clamps it to 0 in the OCI config and then runs the real runc.
  cat >"$TB_BIN/runc-clamp" <<'WRAP'
#!/bin/sh
# runc wrapper: clamp negative oomScoreAdj (no CAP_SYS_RESOURCE in this sandbox), then exec runc.
bundle=""
prev=""
for a in "$@"; do
  case "$prev" in --bundle|-b) bundle=$a ;; esac
  case "$a" in --bundle=*) bundle=${a#--bundle=} ;; esac
  prev=$a
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  sed -i -E 's/"oomScoreAdj":-[0-9]+/"oomScoreAdj":0/' "$bundle/config.json"
fi
exec /usr/sbin/runc "$@"
WRAP
  chmod +x "$TB_BIN/runc-clamp"
}

tb_docker_bridge() {
  if ! ip link show "$TB_BRIDGE" >/dev/null 2>&1; then
    ip link add "$TB_BRIDGE" type bridge
    ip addr add "$TB_BRIDGE_CIDR" dev "$TB_BRIDGE"
  fi
  ip link set "$TB_BRIDGE" up
}

tb_docker_up() {
  tb_docker_install
  if tb_pid_alive dockerd && docker version >/dev/null 2>&1; then tb_say "dockerd already running"; else
    # Only one dockerd per host works; refuse to fight another one for the same resources.
    tb_docker_bridge
    mkdir -p "$TB_DOCKER_ROOT" "$TB_RUN/docker-exec"
    [[ -f $TB_STATE/ip_forward.orig ]] || cat /proc/sys/net/ipv4/ip_forward >"$TB_STATE/ip_forward.orig"
    local cgdriver=cgroupfs
    # dockerd runs setsid, on loopback-only unix socket; no TCP listener.
    setsid /usr/sbin/dockerd \
      --host "$DOCKER_HOST" --data-root "$TB_DOCKER_ROOT" --exec-root "$TB_RUN/docker-exec" \
      --pidfile "$TB_RUN/dockerd.pid" --bridge "$TB_BRIDGE" --storage-driver overlay2 \
      --add-runtime "runc-clamp=$TB_BIN/runc-clamp" --default-runtime runc-clamp \
      --exec-opt "native.cgroupdriver=$cgdriver" --iptables=true --ip-masq=true \
      --insecure-registry "$TB_REGISTRY" \
      >"$TB_LOG/dockerd.log" 2>&1 </dev/null 9>&- &
    tb_wait_for dockerd 60 docker version || { tail -30 "$TB_LOG/dockerd.log" >&2; return 1; }
  fi
  tb_registry_up
}

tb_registry_up() {
  if tb_pid_alive registry && curl -fsS "http://$TB_REGISTRY/v2/" >/dev/null 2>&1; then return 0; fi
  mkdir -p "$TB_REGISTRY_ROOT"
  cat >"$TB_HOME/registry.yml" <<YML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $TB_REGISTRY_ROOT}
  delete: {enabled: true}
http:
  addr: $TB_REGISTRY
YML
  setsid /usr/bin/docker-registry serve "$TB_HOME/registry.yml" >"$TB_LOG/registry.log" 2>&1 </dev/null 9>&- &
  echo $! >"$TB_RUN/registry.pid"
  tb_wait_for registry 30 curl -fsS "http://$TB_REGISTRY/v2/" || { tail -20 "$TB_LOG/registry.log" >&2; return 1; }
}

tb_docker_down() {
  tb_stop_pid registry
  if tb_pid_alive dockerd; then
    # Remove our containers first so dockerd exits promptly (no live-restore here).
    local ids; ids=$(docker ps -aq 2>/dev/null || true)
    [[ -n $ids ]] && docker rm -f $ids >/dev/null 2>&1 || true
    tb_stop_pid dockerd
  fi
  rm -f "$TB_RUN/docker.sock"
  # dockerd leaves its DOCKER* chains and the bridges of user networks behind: remove ours.
  # (Each pipeline may match nothing: with pipefail that is not an error here.)
  local t rule chain
  for t in filter nat; do
    { iptables -t "$t" -S 2>/dev/null | grep -E '^-A (FORWARD|PREROUTING|OUTPUT|POSTROUTING) .*-j DOCKER' | sed 's/^-A/-D/' || true; } |
      while read -r rule; do eval "iptables -t $t $rule" 2>/dev/null || true; done
    for chain in $(iptables -t "$t" -S 2>/dev/null | awk '/^-N DOCKER/ {print $2}'); do iptables -t "$t" -F "$chain" 2>/dev/null || true; done
    for chain in $(iptables -t "$t" -S 2>/dev/null | awk '/^-N DOCKER/ {print $2}'); do iptables -t "$t" -X "$chain" 2>/dev/null || true; done
  done
  { iptables -t nat -S POSTROUTING 2>/dev/null | grep -E "10\.213\." | sed 's/^-A/-D/' || true; } |
    while read -r rule; do eval "iptables -t nat $rule" 2>/dev/null || true; done
  # The session networks' host-isolation chains (infra/docker/provider/host-isolation.ts).
  local spec hook
  for spec in "filter INPUT AGENT-SESSIONS-INPUT" "nat PREROUTING AGENT-SESSIONS-DNAT"; do
    read -r t hook chain <<<"$spec"
    while iptables -t "$t" -D "$hook" -j "$chain" 2>/dev/null; do :; done
    iptables -t "$t" -F "$chain" 2>/dev/null || true
    iptables -t "$t" -X "$chain" 2>/dev/null || true
  done
  # dockerd leaves its network-namespace bind mounts under the exec root.
  { grep -o " $TB_RUN/docker-exec[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  { ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep -E "^($TB_BRIDGE|br-[0-9a-f]{12})$" || true; } |
    while read -r b; do ip link del "$b" 2>/dev/null || true; done
  if [[ -f $TB_STATE/ip_forward.orig ]]; then
    cat "$TB_STATE/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward 2>/dev/null || true
    rm -f "$TB_STATE/ip_forward.orig"
  fi
}

tb_docker_status() {
  if tb_pid_alive dockerd; then echo "dockerd   running (pid $(cat "$TB_RUN/dockerd.pid")), DOCKER_HOST=$DOCKER_HOST, data root $TB_DOCKER_ROOT, bridge $TB_BRIDGE $TB_BRIDGE_CIDR"
  elif [[ -x /usr/sbin/dockerd ]]; then echo "dockerd   installed, not running (scripts/testbed up docker)"
  else echo "dockerd   not installed (scripts/testbed up docker)"; fi
  if tb_pid_alive registry; then echo "registry  running (pid $(cat "$TB_RUN/registry.pid")) at http://$TB_REGISTRY, storage $TB_REGISTRY_ROOT"
  else echo "registry  not running (scripts/testbed up docker)"; fi
}
