# shellcheck shell=bash
# The test bed's Kubernetes: a whole single-node 1.35 cluster (containerd 2 + runc, bridge CNI,
# etcd 3.6, kube-proxy, kube-router enforcing NetworkPolicy, Pod Security admission), built with the
# machine's Go from the Go module proxy (the only source of that code reachable here) and run in a
# network namespace of its own. Sourced after common.sh; never run directly. What was learned
# building and running it: KUBERNETES.md beside this file.
#
#   scripts/testbed build kubernetes   build (no test-bed lock taken; its own lock)
#   scripts/testbed up kubernetes      build, then the cluster (below), then tb_kc_check when it started
#   scripts/testbed check kubernetes   admission, pods Ready, NetworkPolicy enforced, isolation
#   scripts/testbed down kubernetes    stop it; leave no process, netns, link, mount, cgroup
#
# Layout under $TB_HOME/kubernetes-$TB_KC_VERSION:
#   bin/        kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
#               containerd containerd-shim-runc-v2 ctr runc crictl etcd kube-router
#   cni/bin/    bridge host-local loopback portmap (containerd's CNI bin_dir)
#   images/     pause-3.10.1.oci.tar (the sandbox image, imported into containerd)
#   cluster/    the cluster's state: pki and kubeconfigs, containerd root/state, etcd data, the
#               kubelet's root dir, pod logs, CNI config and addresses (logs in $TB_LOG/k135-*.log)
# Wrapper modules in $TB_SRC/kubernetes-current/{kubernetes,etcd}; Go build cache of its own in
# $TB_HOME/gocache-kubernetes-current (same Go as common.sh's, kept apart so it can be measured
# and trimmed without touching the Pulumi builds' cache); modules in the shared GOMODCACHE. (The
# "-current" in those cache names dates from when a 1.20 cluster ran beside it; kept so that a
# machine's warm caches stay warm.)
#
# Builds run under `nice -n 19` with GOMAXPROCS=2 and `go build -p $TB_KC_GO_P` (default 2) so
# tests running beside them keep the CPU. Each binary has a stamp in $TB_STATE holding what it was
# built from; a second build is a few stat calls.

TB_KC_VERSION=${AGENT_SESSIONS_KUBERNETES_CURRENT_VERSION:-1.35.8}
TB_KC_CONTAINERD_VERSION=2.2.9
TB_KC_RUNC_VERSION=1.5.3
TB_KC_CNI_VERSION=1.10.0
TB_KC_CRICTL_VERSION=1.37.0
TB_KC_ETCD_VERSION=3.6.16
TB_KC_KUBE_ROUTER_VERSION=2.1.0

TB_KC_DIR=$TB_HOME/kubernetes-$TB_KC_VERSION
TB_KC_BIN=$TB_KC_DIR/bin
TB_KC_CNI_BIN=$TB_KC_DIR/cni/bin
TB_KC_SRC=$TB_SRC/kubernetes-current
TB_KC_GOCACHE=$TB_HOME/gocache-kubernetes-current
TB_KC_GO_P=${AGENT_SESSIONS_GO_PARALLEL:-2}
TB_KC_TIMES=$TB_LOG/kubernetes-current-build-times.log
TB_KC_KUBE_BINARIES=(kube-apiserver kubectl kube-scheduler kube-proxy kubelet kube-controller-manager)
TB_KC_CNI_PLUGINS=(main/bridge ipam/host-local main/loopback meta/portmap)

# _tb_kc_go ARGS...: the machine's go, niced, its own build cache, modules from the proxy.
_tb_kc_go() {
  env -u GOFLAGS GOTOOLCHAIN=local GOPROXY="${GOPROXY:-https://proxy.golang.org}" GOCACHE="$TB_KC_GOCACHE" \
    GOMAXPROCS=2 GOFLAGS=-buildvcs=false nice -n 19 go "$@"
}

# A stamp per component holds its RECIPE (a string naming every input of the build).
_tb_kc_stamp_file() { echo "$TB_STATE/kubernetes-current-$1"; }
_tb_kc_fresh() { # NAME RECIPE FILE...: built already from exactly RECIPE and every FILE present
  local name=$1 recipe=$2 f; shift 2
  [[ -z ${TB_KC_REBUILD:-} && -f $(_tb_kc_stamp_file "$name") && $(cat "$(_tb_kc_stamp_file "$name")") == "$recipe" ]] || return 1
  for f in "$@"; do [[ -x $f ]] || return 1; done
}
_tb_kc_done() { echo "$2" >"$(_tb_kc_stamp_file "$1")"; }
# _tb_kc_timed NAME CMD...: run CMD, log "NAME SECONDS" with the date to $TB_KC_TIMES.
_tb_kc_timed() {
  local name=$1 t0 rc=0 took; shift
  t0=$(tb_now)
  tb_say "kubernetes: $name ..."
  # (errexit is off in the callers' `||` contexts: the status is checked here.)
  "$@" || rc=$?
  if ((rc)); then tb_say "kubernetes: $name failed ($rc)"; return "$rc"; fi
  took=$(awk -v a="$t0" -v b="$(tb_now)" 'BEGIN{printf "%.1f", b-a}')
  tb_say "kubernetes: $name done in ${took}s"
  printf '%s %s %s\n' "$(date -u +%FT%TZ)" "$name" "$took" >>"$TB_KC_TIMES"
}
_tb_kc_log_fail() { tb_say "$1 failed; last lines of $2:"; tail -30 "$2" >&2; return 1; }

# --- Kubernetes: a wrapper module --------------------------------------------------------------------
#
# k8s.io/kubernetes replaces every staging module (k8s.io/api, ...) with ./staging/src/..., which
# a module download does not have; the proxy serves each of them as its own module at v0.<minor>.<patch>.
# So: require k8s.io/kubernetes vX.Y.Z and replace each k8s.io/<staging> with k8s.io/<staging> v0.Y.Z.

_tb_kc_kube_module() {
  local w=$TB_KC_SRC/kubernetes v=v$TB_KC_VERSION sv gomod r
  sv=v0.${TB_KC_VERSION#*.}
  mkdir -p "$w"
  [[ -f $w/go.mod && -f $w/go.sum ]] && grep -q "k8s.io/kubernetes $v\$" "$w/go.mod" && return 0
  rm -f "$w/go.mod" "$w/go.sum"
  gomod=$(cd "$w" && _tb_kc_go mod download -json "k8s.io/kubernetes@$v" | jq -r .GoMod)
  [[ -f $gomod ]] || { tb_say "k8s.io/kubernetes@$v not downloadable"; return 1; }
  {
    printf 'module agent-sessions.local/testbed/kubernetes-current\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' \
      "$(awk '$1=="go"{print $2; exit}' "$gomod")" "$v"
    while IFS= read -r r; do printf '\t%s => %s %s\n' "$r" "$r" "$sv"; done < <(_tb_kc_go mod edit -json "$gomod" |
      jq -r '.Replace // [] | .[] | select(.New.Path | startswith("./staging/")) | .Old.Path')
    printf ')\n'
  } >"$w/go.mod"
  local pkgs=() b
  for b in "${TB_KC_KUBE_BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b@$v"); done
  (cd "$w" && _tb_kc_go get "${pkgs[@]}") >"$TB_LOG/kubernetes-current-go-get.log" 2>&1 ||
    _tb_kc_log_fail "go get (kubernetes $v)" "$TB_LOG/kubernetes-current-go-get.log"
}

# The -X flags upstream's hack/lib/version.sh sets, from the proxy's record of the release tag.
_tb_kc_kube_ldflags() {
  local v=v$TB_KC_VERSION info commit date flags="-s -w" p
  info=$(cd "$TB_KC_SRC/kubernetes" && _tb_kc_go mod download -json "k8s.io/kubernetes@$v" | jq -r .Info)
  commit=$(jq -r '.Origin.Hash // empty' "$info")
  date=$(date -u -d "$(jq -r .Time "$info")" +%Y-%m-%dT%H:%M:%SZ)
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $p.buildDate=$date -X $p.gitVersion=$v -X $p.gitMajor=${TB_KC_VERSION%%.*}"
    flags+=" -X $p.gitMinor=$(cut -d. -f2 <<<"$TB_KC_VERSION") -X $p.gitTreeState=clean"
    [[ -n $commit ]] && flags+=" -X $p.gitCommit=$commit"
  done
  echo "$flags"
}

# The one source change (for kube-controller-manager): the in-tree hostPath provisioner makes PV
# directories 0750 root, so a non-root pod cannot write to its own PVC; here they are made 0777,
# under /tmp/$TB_KC_PV_BASE rather than the source's fixed /tmp/hostpath_pv (removed whole on down). `go build -overlay` refuses files in the module cache, so the controller-manager
# is built against a module cache of symlinks ($TB_KC_PATCHED_MODCACHE: every entry links to the shared
# one, but k8s.io/kubernetes@vX is a tree of symlinks with the patched file in it). With -trimpath the
# paths compiled in are the same (module@version/...) and the build cache still serves every package
# the patch does not touch. Prints that module cache's path.
TB_KC_PV_BASE=agent-sessions-k135-pv
TB_KC_PATCHED_MODCACHE=$TB_HOME/gomodcache-kubernetes-current-patched
_tb_kc_patched_modcache() {
  local m=$TB_KC_PATCHED_MODCACHE k=k8s.io/kubernetes@v$TB_KC_VERSION e f
  f=$m/$k/pkg/volume/hostpath/host_path.go
  if [[ ! -f $m/complete ]]; then
    rm -rf "$m"; mkdir -p "$m/k8s.io"
    for e in "$GOMODCACHE"/*; do [[ ${e##*/} == k8s.io ]] || ln -s "$e" "$m/${e##*/}"; done
    for e in "$GOMODCACHE"/k8s.io/*; do [[ ${e##*/} == "${k#k8s.io/}" ]] || ln -s "$e" "$m/k8s.io/${e##*/}"; done
    cp -rs "$GOMODCACHE/$k" "$m/$k"
    rm -f "$f"
    sed -e "s|basePath: \"hostpath_pv\"|basePath: \"$TB_KC_PV_BASE\"|" \
      -e 's|os.MkdirAll(pv.Spec.HostPath.Path, 0750)|mkdirAllWritable(pv.Spec.HostPath.Path)|' "$GOMODCACHE/$k/pkg/volume/hostpath/host_path.go" >"$f"
    cat >>"$f" <<'GO'

// agent-sessions testbed: a PV directory writable by the pod whatever its user.
func mkdirAllWritable(p string) error {
	if err := os.MkdirAll(p, 0750); err != nil {
		return err
	}
	return os.Chmod(p, 0777)
}
GO
    [[ $(grep -c "mkdirAllWritable(pv.Spec.HostPath.Path)\|basePath: \"$TB_KC_PV_BASE\"" "$f") == 2 ]] ||
      { tb_say "unexpected host_path.go in $k (the hostPath patch did not apply)"; return 1; }
    touch "$m/complete"
  fi
  echo "$m"
}

# _tb_kc_kube_build LOG-NAME MODCACHE BINARY...: one `go build` of the binaries' cmd/ packages
# (one action graph: the packages they share compile once, both cores busy to the last link),
# into a staging dir, then moved into place.
_tb_kc_kube_build() {
  local name=$1 modcache=$2 log=$TB_LOG/kubernetes-current-build-$1.log stage=$TB_KC_BIN/.new-$1 b pkgs=()
  shift 2
  for b in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  rm -rf "$stage"; mkdir -p "$stage"
  (cd "$TB_KC_SRC/kubernetes" && CGO_ENABLED=0 GOMODCACHE=$modcache _tb_kc_go build -p "$TB_KC_GO_P" -trimpath \
    -tags selinux,notest,grpcnotrace -ldflags "$(_tb_kc_kube_ldflags)" -o "$stage/" "${pkgs[@]}") >"$log" 2>&1 ||
    { _tb_kc_log_fail "build $*" "$log"; return 1; }
  for b in "$@"; do mv -f "$stage/$b" "$TB_KC_BIN/$b"; done
  rmdir "$stage"
}

# The binaries whose stamp is not fresh: those from the shared module cache in one build, then the
# controller-manager (the patched module cache; the build cache serves what it shares with them).
_tb_kc_build_kubernetes() {
  local b recipe r plain=() patched=()
  recipe="kubernetes v$TB_KC_VERSION $(go env GOVERSION) tags=selinux,notest,grpcnotrace cgo=0"
  for b in "${TB_KC_KUBE_BINARIES[@]}"; do
    r=$recipe
    [[ $b == kube-controller-manager ]] && r+=" hostpath=$TB_KC_PV_BASE,0777"
    _tb_kc_fresh "$b" "$r" "$TB_KC_BIN/$b" && continue
    if [[ $b == kube-controller-manager ]]; then patched+=("$b"); else plain+=("$b"); fi
  done
  ((${#plain[@]} + ${#patched[@]})) || return 0
  [[ -f $TB_KC_SRC/kubernetes/go.sum ]] || _tb_kc_timed "kubernetes wrapper module (go get)" _tb_kc_kube_module
  if ((${#plain[@]})); then
    _tb_kc_timed "${plain[*]} v$TB_KC_VERSION" _tb_kc_kube_build kubernetes "$GOMODCACHE" "${plain[@]}" || return 1
    for b in "${plain[@]}"; do _tb_kc_done "$b" "$recipe"; done
  fi
  if ((${#patched[@]})); then
    local m; m=$(_tb_kc_patched_modcache) || return 1
    _tb_kc_timed "kube-controller-manager v$TB_KC_VERSION" _tb_kc_kube_build kube-controller-manager "$m" kube-controller-manager || return 1
    _tb_kc_done kube-controller-manager "$recipe hostpath=$TB_KC_PV_BASE,0777"
  fi
}

# --- etcd: a wrapper module too (server/v3 replaces api, client, pkg with ../ paths) -------------------

_tb_kc_etcd_module() {
  local w=$TB_KC_SRC/etcd v=v$TB_KC_ETCD_VERSION m
  mkdir -p "$w"
  [[ -f $w/go.sum ]] && grep -q "go.etcd.io/etcd/server/v3 $v\$" "$w/go.mod" && return 0
  rm -f "$w/go.mod" "$w/go.sum"
  printf 'module agent-sessions.local/testbed/etcd\n\ngo 1.26\n\nrequire (\n' >"$w/go.mod"
  for m in server/v3 etcdctl/v3 api/v3 client/pkg/v3 client/v3 pkg/v3; do printf '\tgo.etcd.io/etcd/%s %s\n' "$m" "$v" >>"$w/go.mod"; done
  printf ')\n' >>"$w/go.mod"
  (cd "$w" && _tb_kc_go get "go.etcd.io/etcd/server/v3@$v" "go.etcd.io/etcd/etcdctl/v3@$v") >"$TB_LOG/kubernetes-current-etcd-go-get.log" 2>&1 ||
    _tb_kc_log_fail "go get (etcd $v)" "$TB_LOG/kubernetes-current-etcd-go-get.log"
}

_tb_kc_build_etcd() {
  local recipe log=$TB_LOG/kubernetes-current-build-etcd.log
  # Only the server: nothing in the test bed runs etcdctl (one build fewer on a new machine).
  recipe="etcd v$TB_KC_ETCD_VERSION $(go env GOVERSION) cgo=0 server-only"
  _tb_kc_fresh etcd "$recipe" "$TB_KC_BIN/etcd" && return 0
  _tb_kc_etcd_module || return 1
  (cd "$TB_KC_SRC/etcd" && CGO_ENABLED=0 _tb_kc_go build -p "$TB_KC_GO_P" -trimpath -ldflags "-s -w" \
    -o "$TB_KC_BIN/etcd" "go.etcd.io/etcd/server/v3") >"$log" 2>&1 ||
    { _tb_kc_log_fail "build etcd" "$log"; return 1; }
  rm -f "$TB_KC_BIN/etcdctl"
  _tb_kc_done etcd "$recipe"
}

# --- the rest: modules without replace directives, so `go install MODULE/cmd@version` -----------------

# [CGO_ENABLED=0|1] _tb_kc_install LOG GOBIN GO-INSTALL-ARGS...: go install into GOBIN.
_tb_kc_install() {
  local log=$1 gobin=$2; shift 2
  (export GOBIN=$gobin; _tb_kc_go install -p "$TB_KC_GO_P" -trimpath "$@") >"$log" 2>&1 || _tb_kc_log_fail "go install $*" "$log"
}

_tb_kc_build_containerd() {
  local v=v$TB_KC_CONTAINERD_VERSION pkg=github.com/containerd/containerd/v2 recipe log=$TB_LOG/kubernetes-current-build-containerd.log
  recipe="containerd $v $(go env GOVERSION) cgo=0 tags=urfave_cli_no_docs,osusergo,netgo,static_build"
  _tb_kc_fresh containerd "$recipe" "$TB_KC_BIN"/{containerd,containerd-shim-runc-v2,ctr} && return 0
  local x="-s -w -X $pkg/version.Version=$v -X $pkg/version.Package=$pkg"
  CGO_ENABLED=0 _tb_kc_install "$log" "$TB_KC_BIN" -tags urfave_cli_no_docs,osusergo,netgo,static_build -ldflags "$x" \
    "$pkg/cmd/containerd@$v" "$pkg/cmd/ctr@$v" || return 1
  CGO_ENABLED=0 _tb_kc_install "$log.shim" "$TB_KC_BIN" -tags urfave_cli_no_docs,osusergo,netgo,static_build,no_grpc -ldflags "$x" \
    "$pkg/cmd/containerd-shim-runc-v2@$v" || return 1
  _tb_kc_done containerd "$recipe"
}

# runc needs cgo and libseccomp (Debian's libseccomp-dev). Upstream's default tags add libpathrs,
# a Rust library that is not packaged here; without it runc uses its Go path resolution.
_tb_kc_build_runc() {
  local v=v$TB_KC_RUNC_VERSION recipe log=$TB_LOG/kubernetes-current-build-runc.log
  if ! dpkg -s libseccomp-dev >/dev/null 2>&1; then tb_apt_install libseccomp-dev pkg-config gcc libc6-dev; fi
  recipe="runc $v $(go env GOVERSION) cgo=1 tags=seccomp,urfave_cli_no_docs $(dpkg-query -W -f '${Version}' libseccomp-dev)"
  _tb_kc_fresh runc "$recipe" "$TB_KC_BIN/runc" && return 0
  CGO_ENABLED=1 _tb_kc_install "$log" "$TB_KC_BIN" -buildmode=pie -tags seccomp,urfave_cli_no_docs \
    -ldflags "-s -w -X main.gitCommit=$v" "github.com/opencontainers/runc@$v" || return 1
  _tb_kc_done runc "$recipe"
}

_tb_kc_build_cni() {
  local v=v$TB_KC_CNI_VERSION pkg=github.com/containernetworking/plugins recipe p pkgs=() files=()
  recipe="cni-plugins $v $(go env GOVERSION) cgo=0 ${TB_KC_CNI_PLUGINS[*]}"
  for p in "${TB_KC_CNI_PLUGINS[@]}"; do pkgs+=("$pkg/plugins/$p@$v"); files+=("$TB_KC_CNI_BIN/${p#*/}"); done
  _tb_kc_fresh cni-plugins "$recipe" "${files[@]}" && return 0
  mkdir -p "$TB_KC_CNI_BIN"
  CGO_ENABLED=0 _tb_kc_install "$TB_LOG/kubernetes-current-build-cni.log" "$TB_KC_CNI_BIN" \
    -ldflags "-s -w -X $pkg/pkg/utils/buildversion.BuildVersion=$v" "${pkgs[@]}" || return 1
  _tb_kc_done cni-plugins "$recipe"
}

_tb_kc_build_crictl() {
  local v=v$TB_KC_CRICTL_VERSION recipe
  recipe="crictl $v $(go env GOVERSION) cgo=0"
  _tb_kc_fresh crictl "$recipe" "$TB_KC_BIN/crictl" && return 0
  CGO_ENABLED=0 _tb_kc_install "$TB_LOG/kubernetes-current-build-crictl.log" "$TB_KC_BIN" \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$TB_KC_CRICTL_VERSION" "sigs.k8s.io/cri-tools/cmd/crictl@$v" || return 1
  _tb_kc_done crictl "$recipe"
}

_tb_kc_build_kube_router() {
  local v=v$TB_KC_KUBE_ROUTER_VERSION pkg=github.com/cloudnativelabs/kube-router/v2 recipe
  recipe="kube-router $v $(go env GOVERSION) cgo=0"
  _tb_kc_fresh kube-router "$recipe" "$TB_KC_BIN/kube-router" && return 0
  CGO_ENABLED=0 _tb_kc_install "$TB_LOG/kubernetes-current-build-kube-router.log" "$TB_KC_BIN" \
    -ldflags "-s -w -X $pkg/pkg/version.Version=$v -X $pkg/pkg/version.BuildDate=2024-03-03T05:25:26Z" "$pkg/cmd/kube-router@$v" || return 1
  _tb_kc_done kube-router "$recipe"
}

# tb_kc_build [COMPONENT...]: kubernetes etcd containerd runc cni crictl kube-router (default: all).
tb_kc_build() {
  command -v go >/dev/null || { tb_say "kubernetes needs the machine's go (not found)"; return 1; }
  command -v jq >/dev/null || tb_apt_install jq
  mkdir -p "$TB_KC_BIN" "$TB_KC_CNI_BIN" "$TB_KC_SRC" "$TB_KC_GOCACHE"
  # One build at a time (its own lock: the test bed's global one is not held while compiling).
  exec 8>"$TB_HOME/.lock-kubernetes-current-build"
  flock 8
  local c comps=("$@") t0=$SECONDS
  ((${#comps[@]})) || comps=(kubernetes etcd containerd runc cni crictl kube-router)
  for c in "${comps[@]}"; do
    case $c in
      kubernetes) _tb_kc_build_kubernetes ;;
      etcd) _tb_kc_timed "etcd v$TB_KC_ETCD_VERSION" _tb_kc_build_etcd ;;
      containerd) _tb_kc_timed "containerd v$TB_KC_CONTAINERD_VERSION" _tb_kc_build_containerd ;;
      runc) _tb_kc_timed "runc v$TB_KC_RUNC_VERSION" _tb_kc_build_runc ;;
      cni) _tb_kc_timed "CNI plugins v$TB_KC_CNI_VERSION" _tb_kc_build_cni ;;
      crictl) _tb_kc_timed "crictl v$TB_KC_CRICTL_VERSION" _tb_kc_build_crictl ;;
      kube-router) _tb_kc_timed "kube-router v$TB_KC_KUBE_ROUTER_VERSION" _tb_kc_build_kube_router ;;
      *) tb_say "kubernetes: unknown component '$c' (kubernetes etcd containerd runc cni crictl kube-router)"; exec 8>&-; return 2 ;;
    esac || { exec 8>&-; return 1; }
  done
  exec 8>&-
  tb_say "kubernetes build (${comps[*]}) in $((SECONDS - t0))s; binaries in $TB_KC_BIN"
}

# --- status -----------------------------------------------------------------------------------------

tb_kc_status() {
  local b first
  if [[ ! -d $TB_KC_BIN ]]; then echo "kubernetes not built (scripts/testbed build kubernetes)"; return 0; fi
  echo "kubernetes $TB_KC_VERSION, in $TB_KC_BIN"
  # The first line is taken by a reader of the whole output (sed -n 1p, not head -1): a command still
  # writing after head exits dies of SIGPIPE, and under pipefail that ended `status` (the CNI
  # loopback plugin's second line did, before the cluster's status was printed).
  _tb_kc_v() { # NAME CMD...: first line of CMD's output, or "missing"
    local name=$1; shift
    if [[ -x $1 ]]; then first=$("$@" 2>&1 | sed -n 1p); printf '  %-23s %s\n' "$name" "$first"; else printf '  %-23s missing\n' "$name"; fi
  }
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do _tb_kc_v "$b" "$TB_KC_BIN/$b" --version; done
  _tb_kc_v kubectl "$TB_KC_BIN/kubectl" version --client
  _tb_kc_v containerd "$TB_KC_BIN/containerd" --version
  if [[ -x $TB_KC_BIN/containerd-shim-runc-v2 ]]; then
    printf '  %-23s %s\n' containerd-shim-runc-v2 "$("$TB_KC_BIN/containerd-shim-runc-v2" -v 2>&1 | awk '/Version:/ && !f {print $2; f=1}')"
  else printf '  %-23s missing\n' containerd-shim-runc-v2; fi
  _tb_kc_v runc "$TB_KC_BIN/runc" --version
  _tb_kc_v crictl "$TB_KC_BIN/crictl" --version
  _tb_kc_v etcd "$TB_KC_BIN/etcd" --version
  _tb_kc_v kube-router "$TB_KC_BIN/kube-router" --version
  # A CNI plugin run without CNI_COMMAND prints its name and version.
  for b in "${TB_KC_CNI_PLUGINS[@]}"; do _tb_kc_v "cni ${b#*/}" "$TB_KC_CNI_BIN/${b#*/}"; done
  tb_kc_cluster_status
}

# --- the cluster -------------------------------------------------------------------------------------
#
# A whole single-node 1.35 cluster that runs pods, isolated from the host's own networking and
# from anything else on the machine:
#  * Every daemon runs in the network namespace $TB_KC_NETNS (entered with nsenter --net). It holds
#    only `lo` and our bridge $TB_KC_BRIDGE ($TB_KC_NODE_IP/24, pods' veths on it): no route to
#    anything else, so nothing in it can send a packet beyond loopback and that bridge. Its iptables
#    (kube-proxy's KUBE-*, kube-router's KUBE-ROUTER-*, the kubelet's, portmap's CNI-*), ipsets,
#    conntrack table and net.* sysctls are the namespace's own and go with it.
#  * Two small relays join it to the host, each a pair of socat over a unix socket (bytes only, no
#    route): the host's registry 127.0.0.1:5000 appears as 127.0.0.1:5000 inside (containerd pulls
#    session images by their registry digest, as on a real cluster), and the API server
#    127.0.0.1:$TB_KC_API_PORT inside appears as 127.0.0.1:$TB_KC_API_PORT on the host's loopback
#    (kubectl/the runner without nsenter).
#  * Pods reach the API server as on any cluster, through the `kubernetes` Service: its EndpointSlice
#    (and Endpoints) name $TB_KC_NODE_IP:$TB_KC_API_PORT, where a socat in the namespace relays to the
#    API server on the namespace's loopback (_tb_kc_pod_api_relay_up). Nothing leaves the namespace.
#  * containerd: root, state, socket, CNI config, pod network namespaces (under its state dir) of its
#    own; NRI off (else /var/run/nri/nri.sock). The kubelet: cgroup root /$TB_KC_NETNS (pods in
#    /$TB_KC_NETNS/kubepods of each hierarchy), root dir and pod
#    logs dir of its own, and in a mount namespace of its own where the two paths 1.35 still fixes,
#    /var/lib/kubelet/device-plugins (its registration socket and checkpoint) and
#    /var/log/containers (log symlinks), are directories of ours bound over the shared ones. Its root
#    dir is a shared bind mount made before, so the volumes it mounts there reach containerd and runc
#    in the host's mount namespace.
#  * The kubelet sets a few global kernel settings (vm.overcommit_memory, kernel.panic, ...): saved
#    before up, restored on down.
# `down` stops what we started by pid, removes the namespace (with its bridge, chains and ipsets),
# our cgroups, our mounts and our state; binaries, images and certificates stay.

TB_KC_NETNS=as-k135
TB_KC_STATE=$TB_KC_DIR/cluster
TB_KC_PAUSE_TAG=3.10.1
TB_KC_PAUSE_IMAGE=registry.k8s.io/pause:$TB_KC_PAUSE_TAG
TB_KC_NODE=k135
TB_KC_BRIDGE=k135br0
TB_KC_POD_CIDR=10.216.0.0/24
TB_KC_NODE_IP=10.216.0.1
TB_KC_SERVICE_CIDR=10.215.0.0/24
# The host link: a veth pair between the host and the namespace, so that the host's runner reaches
# pods and ClusterIPs as on a real cluster's node (routes for both CIDRs via the namespace end).
TB_KC_LINK_HOST=k135h
TB_KC_LINK_NS=k135n
TB_KC_LINK_HOST_IP=10.217.0.1
TB_KC_LINK_NS_IP=10.217.0.2
TB_KC_GUARD=AGENT-SESSIONS-K135-INPUT
# The host services the tests give sessions, the only host ports pods may open a connection to
# through the link (to $TB_KC_LINK_HOST_IP only): the git server (relayed onto the link address,
# below) and the range the tests' model servers bind in on the link address
# (test/support/testbed.ts sessionHostPort). NetworkPolicy (the session's egress) decides per session.
TB_KC_HOST_PORTS="${TB_GIT_PORT:-8418},11434:11499"
TB_KC_ETCD_PORT=22379
TB_KC_API_PORT=16443
TB_KC_KUBELET_PORT=20250
TB_KC_CTR_SOCK=$TB_RUN/k135-containerd.sock
TB_KC_KUBELET_DIR=$TB_KC_STATE/kubelet
TB_KC_CGROUP=$TB_KC_NETNS
TB_KC_KUBECONFIG=$TB_KC_STATE/admin.kubeconfig
# In stop order. registry-relay-host and api-relay-host run in the host's namespace.
TB_KC_DAEMONS=(kube-router kube-proxy kubelet kube-scheduler kube-controller-manager api-relay api-relay-host
  api-relay-pods kube-apiserver etcd registry-relay registry-relay-host containerd git-relay-host)
TB_KC_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# Fixed places the kubelet (in its mount namespace) and libcni (containerd) use on the host.
TB_KC_FIXED_DIRS=(/var/lib/kubelet /var/lib/kubelet/device-plugins /var/log/containers /var/lib/cni)

# nsenter --net, not `ip netns exec`: the latter also makes a mount namespace with a fresh /sys,
# which hides /sys/fs/cgroup from runc (and would keep containerd's mounts from a kubelet).
_tb_kc_ns() { nsenter --net="/run/netns/$TB_KC_NETNS" "$@"; }
# (without containerd's cgroup v1 deprecation warning, which ctr prints on every call)
_tb_kc_ctr() { { "$TB_KC_BIN/ctr" --address "$TB_KC_CTR_SOCK" "$@" 2>&1 1>&3 3>&- | { grep -v 'cgroup v1 is deprecated' >&2 || true; }; } 3>&1; }
_tb_kc_kubectl() { _tb_kc_ns "$TB_KC_BIN/kubectl" --kubeconfig "$TB_KC_KUBECONFIG" --cache-dir "$TB_KC_STATE/kubectl-cache" "$@"; }
_tb_kc_crictl() { "$TB_KC_BIN/crictl" --config "$TB_KC_STATE/crictl.yaml" "$@"; }

# _tb_kc_spawn NAME CMD...: a daemon inside the network namespace, pid in $TB_RUN/k135-NAME.pid.
# fd 8 and 9 are build and test-bed locks: a daemon must not keep them.
_tb_kc_spawn() { _tb_kc_spawn_in "nsenter --net=/run/netns/$TB_KC_NETNS" "$@"; }
# _tb_kc_spawn_host NAME CMD...: the same in the host's network namespace (the relays' host ends).
_tb_kc_spawn_host() { _tb_kc_spawn_in "" "$@"; }
_tb_kc_spawn_in() {
  local enter=$1 name=k135-$2; shift 2
  tb_pid_alive "$name" && return 0
  rm -f "$TB_RUN/$name.pid"
  # shellcheck disable=SC2016,SC2086
  setsid env -i PATH="$TB_KC_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$TB_KC_STATE" LANG=C.UTF-8 \
    $enter sh -c 'echo $$ >"$0" && exec "$@"' "$TB_RUN/$name.pid" "$@" \
    >>"$TB_LOG/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  tb_wait_for "$name pid file" 10 test -s "$TB_RUN/$name.pid"
}
_tb_kc_fail() { tb_say "$1 failed; last lines of $TB_LOG/k135-$2.log:"; tail -25 "$TB_LOG/k135-$2.log" >&2; return 1; }

_tb_kc_pause_image() {
  local out=$TB_KC_DIR/images/pause-$TB_KC_PAUSE_TAG.oci.tar src
  [[ -s $out ]] && return 0
  src=$(cd "$TB_KC_SRC/kubernetes" && _tb_kc_go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  local w; w=$(mktemp -d)
  mkdir -p "$w/rootfs" "$w/oci/blobs/sha256" "$TB_KC_DIR/images"
  gcc -Os -static -DVERSION="$TB_KC_PAUSE_TAG" -o "$w/rootfs/pause" "$src"
  cp "$w/rootfs/pause" "$TB_KC_BIN/pause"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$w/rootfs" -cf "$w/layer.tar" pause
  local layer diff cfg man cfgsz mansz laysz
  diff=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
  gzip -n -9 <"$w/layer.tar" >"$w/layer.tar.gz"
  layer=$(sha256sum "$w/layer.tar.gz" | cut -d' ' -f1); laysz=$(stat -c %s "$w/layer.tar.gz")
  mv "$w/layer.tar.gz" "$w/oci/blobs/sha256/$layer"
  printf '{"architecture":"amd64","os":"linux","config":{"User":"65535:65535","Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$diff" >"$w/config.json"
  cfg=$(sha256sum "$w/config.json" | cut -d' ' -f1); cfgsz=$(stat -c %s "$w/config.json")
  mv "$w/config.json" "$w/oci/blobs/sha256/$cfg"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
    "$cfg" "$cfgsz" "$layer" "$laysz" >"$w/manifest.json"
  man=$(sha256sum "$w/manifest.json" | cut -d' ' -f1); mansz=$(stat -c %s "$w/manifest.json")
  mv "$w/manifest.json" "$w/oci/blobs/sha256/$man"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$man" "$mansz" "$TB_KC_PAUSE_IMAGE" "$TB_KC_PAUSE_TAG" >"$w/oci/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$w/oci/oci-layout"
  tar -C "$w/oci" -cf "$out.tmp" oci-layout index.json blobs
  mv "$out.tmp" "$out"
  rm -rf "$w"
}


# containerd 2 config (version 3 schema): cgroupfs (SystemdCgroup = false: no systemd here), our runc,
# our CNI plugins and config, the registry through the relay (plain HTTP), pod netns under its state.
_tb_kc_containerd_config() {
  local c=$TB_KC_STATE/containerd
  mkdir -p "$c/root" "$c/state" "$c/certs.d/127.0.0.1:5000"
  cat >"$c/certs.d/127.0.0.1:5000/hosts.toml" <<TOML
server = "http://127.0.0.1:5000"
[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
TOML
  cat >"$c/config.toml" <<TOML
version = 3
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$TB_KC_CTR_SOCK"
[ttrpc]
  address = "$TB_KC_CTR_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$TB_KC_PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$c/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  # Root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj (the kubelet asks -998 for every
  # sandbox) fails in runc; this clamps it to containerd's own (0).
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$TB_KC_BIN/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$TB_KC_CNI_BIN"]
    conf_dir = "$TB_KC_STATE/cni-conf"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins.'io.containerd.transfer.v1.local']
  config_path = "$c/certs.d"
TOML
  # The pod network: our bridge, host-local addresses of our own CIDR (its state under ours), no
  # masquerading (nothing leaves the namespace anyway).
  mkdir -p "$TB_KC_STATE/cni-conf"
  cat >"$TB_KC_STATE/cni-conf/10-k135-bridge.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "k135",
  "plugins": [
    {"type": "bridge", "bridge": "$TB_KC_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$TB_KC_STATE/cni-ipam",
              "ranges": [[{"subnet": "$TB_KC_POD_CIDR", "gateway": "$TB_KC_NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 10\n' "$TB_KC_CTR_SOCK" "$TB_KC_CTR_SOCK" >"$TB_KC_STATE/crictl.yaml"
}

_tb_kc_cert() { # NAME SUBJECT [SANS]
  local name=$1 subj=$2 sans=${3:-} p=$TB_KC_STATE/pki
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/$name.key" 2>/dev/null
  openssl req -new -key "$p/$name.key" -subj "$subj" -out "$p/$name.csr" 2>/dev/null
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n $sans ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$sans"
    else echo "extendedKeyUsage=clientAuth"; fi; } >"$p/$name.ext"
  openssl x509 -req -in "$p/$name.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 3650 \
    -extfile "$p/$name.ext" -out "$p/$name.crt" 2>/dev/null
  rm -f "$p/$name.csr" "$p/$name.ext"
}

_tb_kc_kubeconfig() { # FILE CERTNAME
  local p=$TB_KC_STATE/pki
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: k135
  cluster:
    server: https://127.0.0.1:$TB_KC_API_PORT
    certificate-authority-data: $(base64 -w0 "$p/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$p/$2.crt")
    client-key-data: $(base64 -w0 "$p/$2.key")
contexts:
- name: k135
  context: {cluster: k135, user: $2, namespace: default}
current-context: k135
KC
  chmod 600 "$1"
}

# Certificates for every component (made once; the recipe in `complete` names what they hold).
_tb_kc_pki() {
  local p=$TB_KC_STATE/pki recipe="2 $TB_KC_NODE $TB_KC_NODE_IP $TB_KC_SERVICE_CIDR $TB_KC_API_PORT"
  [[ -f $p/complete && $(cat "$p/complete") == "$recipe" ]] && return 0
  rm -rf "$p"; mkdir -p "$p"; chmod 700 "$p"
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$p/ca.key" -subj "/CN=agent-sessions-k135-ca" -days 3650 -out "$p/ca.crt" 2>/dev/null
  _tb_kc_cert apiserver "/CN=kube-apiserver" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:${TB_KC_SERVICE_CIDR%.0/*}.1,IP:$TB_KC_NODE_IP"
  _tb_kc_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  _tb_kc_cert admin "/O=system:masters/CN=agent-sessions-admin"
  _tb_kc_cert controller-manager "/CN=system:kube-controller-manager"
  _tb_kc_cert scheduler "/CN=system:kube-scheduler"
  _tb_kc_cert kube-proxy "/CN=system:kube-proxy"
  _tb_kc_cert kube-router "/CN=system:kube-router"
  _tb_kc_cert kubelet-client "/O=system:nodes/CN=system:node:$TB_KC_NODE"
  _tb_kc_cert kubelet-serving "/CN=$TB_KC_NODE" "DNS:$TB_KC_NODE,DNS:localhost,IP:127.0.0.1"
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/sa.key" 2>/dev/null
  openssl ec -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  local c
  for c in admin controller-manager scheduler kube-proxy kube-router; do _tb_kc_kubeconfig "$TB_KC_STATE/$c.kubeconfig" "$c"; done
  _tb_kc_kubeconfig "$TB_KC_STATE/kubelet.kubeconfig" kubelet-client
  # The API server reaches the kubelet by the node's Hostname address; in its own mount namespace
  # this file is its /etc/hosts, so that name is 127.0.0.1 (the kubelet listens on loopback only).
  printf '127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$TB_KC_NODE" >"$TB_KC_STATE/apiserver-hosts"
  echo "$recipe" >"$p/complete"
}

# --- host side: namespace, bridge, cgroups, fixed directories, kernel settings --------------------------

_tb_kc_netns_up() {
  ip netns list | grep -qw "$TB_KC_NETNS" || ip netns add "$TB_KC_NETNS"
  ip -n "$TB_KC_NETNS" link set lo up
  # Our bridge exists before the kubelet starts: its address is the node's InternalIP. The bridge
  # CNI plugin then finds it (and its gateway address) already there.
  if ! ip -n "$TB_KC_NETNS" link show "$TB_KC_BRIDGE" >/dev/null 2>&1; then
    ip -n "$TB_KC_NETNS" link add "$TB_KC_BRIDGE" type bridge
    ip -n "$TB_KC_NETNS" addr add "$TB_KC_NODE_IP/${TB_KC_POD_CIDR#*/}" dev "$TB_KC_BRIDGE"
  fi
  ip -n "$TB_KC_NETNS" link set "$TB_KC_BRIDGE" up
  # The namespace's own copies (per network namespace since Linux 5.3): bridged pod traffic passes
  # its iptables (kube-router's policy chains, kube-proxy's DNAT).
  _tb_kc_ns sh -c 'echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables && echo 1 >/proc/sys/net/ipv4/ip_forward'
}

# The host link. The host's INPUT refuses every connection from it ($TB_KC_GUARD: only replies to
# the host's own connections pass), so neither a pod nor a daemon of the namespace reaches a host
# service through it; pods reach nothing else beyond their bridge either (the namespace has no route
# but the link's /30). A session policy admits the host's runner by its `runnerCidr`, the link's
# host address ($TB_KC_LINK_HOST_IP/32).
_tb_kc_link_up() {
  if ! ip link show "$TB_KC_LINK_HOST" >/dev/null 2>&1; then
    ip link add "$TB_KC_LINK_HOST" type veth peer name "$TB_KC_LINK_NS" netns "$TB_KC_NETNS"
    ip addr add "$TB_KC_LINK_HOST_IP/30" dev "$TB_KC_LINK_HOST"
    ip -n "$TB_KC_NETNS" addr add "$TB_KC_LINK_NS_IP/30" dev "$TB_KC_LINK_NS"
  fi
  # The guard before the link is up: nothing from it reaches the host unguarded.
  if ! iptables -w 10 -C INPUT -i "$TB_KC_LINK_HOST" -j "$TB_KC_GUARD" 2>/dev/null; then
    iptables -w 10 -N "$TB_KC_GUARD" 2>/dev/null || iptables -w 10 -F "$TB_KC_GUARD"
    iptables -w 10 -A "$TB_KC_GUARD" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
    iptables -w 10 -A "$TB_KC_GUARD" -d "$TB_KC_LINK_HOST_IP/32" -p tcp -m multiport --dports "$TB_KC_HOST_PORTS" -j RETURN
    iptables -w 10 -A "$TB_KC_GUARD" -j LOG --log-prefix "agent-sessions-k135-in: "
    iptables -w 10 -A "$TB_KC_GUARD" -j REJECT --reject-with icmp-admin-prohibited
    iptables -w 10 -I INPUT 1 -i "$TB_KC_LINK_HOST" -j "$TB_KC_GUARD"
  fi
  ip link set "$TB_KC_LINK_HOST" up
  ip -n "$TB_KC_NETNS" link set "$TB_KC_LINK_NS" up
  ip route replace "$TB_KC_POD_CIDR" via "$TB_KC_LINK_NS_IP" dev "$TB_KC_LINK_HOST"
  ip route replace "$TB_KC_SERVICE_CIDR" via "$TB_KC_LINK_NS_IP" dev "$TB_KC_LINK_HOST"
}

_tb_kc_link_down() {
  ip link del "$TB_KC_LINK_HOST" 2>/dev/null || true   # its routes go with it
  while iptables -w 10 -D INPUT -i "$TB_KC_LINK_HOST" -j "$TB_KC_GUARD" 2>/dev/null; do :; done
  iptables -w 10 -F "$TB_KC_GUARD" 2>/dev/null || true
  iptables -w 10 -X "$TB_KC_GUARD" 2>/dev/null || true
}

# Packets the guard refused since up (0 when absent).
_tb_kc_guard_refused() { { iptables -w 10 -nvxL "$TB_KC_GUARD" 2>/dev/null || true; } | awk '$3=="LOG"{print $1; f=1} END{if(!f) print 0}'; }

# cgroup root of the kubelet: /$TB_KC_CGROUP in each v1 hierarchy (and the unified one).
_tb_kc_cgroups_up() {
  local h
  for h in /sys/fs/cgroup/*/; do mkdir -p "$h$TB_KC_CGROUP"; done
  if [[ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]]; then
    [[ -n $(cat "/sys/fs/cgroup/cpuset/$TB_KC_CGROUP/cpuset.cpus") ]] || cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$TB_KC_CGROUP/cpuset.cpus"
    [[ -n $(cat "/sys/fs/cgroup/cpuset/$TB_KC_CGROUP/cpuset.mems") ]] || cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$TB_KC_CGROUP/cpuset.mems"
  fi
}

# Global kernel settings the kubelet sets, and the fixed directories it or libcni make: recorded
# before the first up.
_tb_kc_save_host() {
  local f=$TB_STATE/kubernetes-current-host k line
  [[ -f $f ]] && return 0
  for k in "${TB_KC_SYSCTLS[@]}"; do
    echo "$k=$(cat "/proc/sys/${k//.//}")"
  done >"$f.tmp"
  for k in "${TB_KC_FIXED_DIRS[@]}"; do [[ -e $k ]] || echo "created=$k"; done >>"$f.tmp"
  mv "$f.tmp" "$f"
}

_tb_kc_restore_host() {
  local f=$TB_STATE/kubernetes-current-host line k v
  [[ -f $f ]] || return 0
  while IFS= read -r line; do
    k=${line%%=*} v=${line#*=}
    case $k in
      # Only if empty: something else may have put its own things there meanwhile.
      created)
        if [[ $v == /var/lib/cni ]]; then rm -rf "$v"   # libcni's cache: only our containerd uses CNI here
        elif [[ -d $v ]]; then find "$v" -depth -type d -empty -delete 2>/dev/null || true; fi ;;
      *)
        echo "$v" >"/proc/sys/${k//.//}" 2>/dev/null || true ;;
    esac
  done <"$f"
  rm -f "$f"
}

# --- daemons ----------------------------------------------------------------------------------------

# A relay: socat on one side's loopback to a unix socket, socat on the other side from it. Bytes
# only: no route between the namespaces. fork: one child per connection.
_tb_kc_relays_up() {
  _tb_kc_spawn_host registry-relay-host socat "UNIX-LISTEN:$TB_RUN/k135-registry.sock,unlink-early,fork" "TCP:$TB_REGISTRY"
  _tb_kc_spawn registry-relay socat "TCP-LISTEN:${TB_REGISTRY#*:},bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$TB_RUN/k135-registry.sock"
}
# The git server listens on the Docker bridge's address only; pods reach it on the link's host
# address through this relay (host side, bytes only). Skipped when the git server is not there.
_tb_kc_git_relay_up() {
  [[ -n ${TB_GIT_ADDRESS:-} ]] || return 0
  _tb_kc_spawn_host git-relay-host socat "TCP-LISTEN:$TB_GIT_PORT,bind=$TB_KC_LINK_HOST_IP,reuseaddr,fork" "TCP:$TB_GIT_ADDRESS:$TB_GIT_PORT"
}
_tb_kc_api_relay_up() {
  _tb_kc_spawn api-relay socat "UNIX-LISTEN:$TB_RUN/k135-api.sock,unlink-early,fork" "TCP:127.0.0.1:$TB_KC_API_PORT"
  _tb_kc_spawn_host api-relay-host socat "TCP-LISTEN:$TB_KC_API_PORT,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$TB_RUN/k135-api.sock"
}
# In-cluster clients (the control plane's runner pod, infra/control-plane) reach the API server as on
# any cluster: the `kubernetes` Service ($TB_KC_SERVICE_CIDR's .1:443) -> its EndpointSlice
# $TB_KC_NODE_IP:$TB_KC_API_PORT (kube-proxy's DNAT, _tb_kc_bootstrap_objects) -> this relay on the
# bridge's address -> the API server on the namespace's 127.0.0.1. Both ends are in the namespace: no
# host port, nothing for the host guard. The API server itself stays on loopback; socat only copies
# bytes, so TLS (the serving certificate names the Service IP and the bridge address, _tb_kc_pki) and
# authentication stay end to end. Session pods carry no token (anonymous gets
# system:public-info-viewer only) and their NetworkPolicy egress does not admit it anyway.
_tb_kc_pod_api_relay_up() {
  _tb_kc_spawn api-relay-pods socat "TCP-LISTEN:$TB_KC_API_PORT,bind=$TB_KC_NODE_IP,reuseaddr,fork" "TCP:127.0.0.1:$TB_KC_API_PORT"
}

_tb_kc_start_containerd() {
  _tb_kc_containerd_config
  _tb_kc_spawn containerd "$TB_KC_BIN/containerd" --config "$TB_KC_STATE/containerd/config.toml"
  tb_wait_for "containerd socket" 30 _tb_kc_ctr version || _tb_kc_fail containerd containerd
  # The sandbox image: no registry serves it; imported, and pinned by pinned_images.sandbox.
  _tb_kc_pause_image
  _tb_kc_ctr -n k8s.io images ls -q | grep -qx "$TB_KC_PAUSE_IMAGE" ||
    _tb_kc_ctr -n k8s.io images import "$TB_KC_DIR/images/pause-$TB_KC_PAUSE_TAG.oci.tar" >/dev/null
}

_tb_kc_start_etcd() {
  mkdir -p "$TB_KC_STATE/etcd"; chmod 700 "$TB_KC_STATE/etcd"
  _tb_kc_spawn etcd "$TB_KC_BIN/etcd" --name k135 --data-dir "$TB_KC_STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$TB_KC_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$TB_KC_ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((TB_KC_ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((TB_KC_ETCD_PORT + 1))" \
    --initial-cluster "k135=http://127.0.0.1:$((TB_KC_ETCD_PORT + 1))" --initial-cluster-state new \
    --listen-metrics-urls "http://127.0.0.1:$((TB_KC_ETCD_PORT + 2))"
  tb_wait_for "etcd" 30 _tb_kc_ns curl -fsS "http://127.0.0.1:$TB_KC_ETCD_PORT/health" || _tb_kc_fail etcd etcd
}

# The API server's audit log records exec sessions only (pods/exec, metadata level): the
# engine tests' "no exec was created" (execsSince) reads it; containerd keeps no exec history.
TB_KC_AUDIT_LOG=$TB_LOG/k135-audit.log
_tb_kc_start_apiserver() {
  local p=$TB_KC_STATE/pki
  cat >"$TB_KC_STATE/audit-policy.yaml" <<'YAML'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: "", resources: [pods/exec]}]
- level: None
YAML
  # shellcheck disable=SC2016
  _tb_kc_spawn kube-apiserver unshare -m --propagation private \
    sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$TB_KC_STATE/apiserver-hosts" \
    "$TB_KC_BIN/kube-apiserver" \
    --bind-address=127.0.0.1 --secure-port="$TB_KC_API_PORT" --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --etcd-servers="http://127.0.0.1:$TB_KC_ETCD_PORT" \
    --client-ca-file="$p/ca.crt" --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" --kubelet-preferred-address-types=Hostname \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range="$TB_KC_SERVICE_CIDR" --allow-privileged=true --profiling=false \
    --audit-policy-file="$TB_KC_STATE/audit-policy.yaml" --audit-log-path="$TB_KC_AUDIT_LOG" \
    --audit-log-maxsize=20 --audit-log-maxbackup=1
  tb_wait_for "kube-apiserver /readyz" 120 _tb_kc_kubectl get --raw /readyz || _tb_kc_fail kube-apiserver kube-apiserver
}

# kube-router's rights (its upstream firewall DaemonSet's ClusterRole, reads only but for leases).
_tb_kc_bootstrap_objects() {
  # --endpoint-reconciler-type=none: the API server never writes the `kubernetes` Service's
  # endpoints; they name the pods' relay (_tb_kc_pod_api_relay_up). kube-proxy 1.35 reads only the
  # EndpointSlice; the Endpoints are for clients that still read those (the control-plane test). The
  # slice has a manager of ours and the Endpoints skip-mirror, so no controller rewrites either.
  # (kubectl warns that v1 Endpoints is deprecated: that line is dropped.)
  _tb_kc_kubectl apply -f - 2> >(grep -v 'v1 Endpoints is deprecated' >&2) >/dev/null <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: agent-sessions-testbed}
addressType: IPv4
endpoints:
- addresses: ["$TB_KC_NODE_IP"]
  conditions: {ready: true}
ports:
- {name: https, port: $TB_KC_API_PORT, protocol: TCP}
---
apiVersion: v1
kind: Endpoints
metadata:
  name: kubernetes
  namespace: default
  labels: {endpointslice.kubernetes.io/skip-mirror: "true"}
subsets:
- addresses: [{ip: "$TB_KC_NODE_IP"}]
  ports: [{name: https, port: $TB_KC_API_PORT, protocol: TCP}]
YAML
  _tb_kc_kubectl apply -f - >/dev/null <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: agent-sessions-testbed:kube-router}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [list, get, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, get, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, get, watch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: agent-sessions-testbed:kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agent-sessions-testbed:kube-router"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:kube-router"}
---
# Dynamic PVs from the (patched) in-tree hostPath provisioner.
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
# The Node authorizer may not know yet that a new pod on
# this node uses a claim, and the kubelet then backs off 10 s before mounting; single node, so all
# claims are this node's anyway.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "agent-sessions-testbed:node-volume-reader"}
rules:
- apiGroups: [""]
  resources: [persistentvolumeclaims, persistentvolumes]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "agent-sessions-testbed:node-volume-reader"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agent-sessions-testbed:node-volume-reader"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}
YAML
}

_tb_kc_start_controllers() {
  local p=$TB_KC_STATE/pki k
  k=$TB_KC_STATE/controller-manager.kubeconfig
  mkdir -p "$TB_KC_STATE/volume-plugins"
  _tb_kc_spawn kube-controller-manager "$TB_KC_BIN/kube-controller-manager" \
    --kubeconfig="$k" --authentication-kubeconfig="$k" --authorization-kubeconfig="$k" \
    --bind-address=127.0.0.1 --secure-port=20257 --leader-elect=false \
    --client-ca-file="$p/ca.crt" --root-ca-file="$p/ca.crt" \
    --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
    --service-account-private-key-file="$p/sa.key" --use-service-account-credentials=true \
    --service-cluster-ip-range="$TB_KC_SERVICE_CIDR" --allocate-node-cidrs=false \
    --enable-hostpath-provisioner=true --flex-volume-plugin-dir="$TB_KC_STATE/volume-plugins" --profiling=false
  k=$TB_KC_STATE/scheduler.kubeconfig
  _tb_kc_spawn kube-scheduler "$TB_KC_BIN/kube-scheduler" \
    --kubeconfig="$k" --authentication-kubeconfig="$k" --authorization-kubeconfig="$k" \
    --bind-address=127.0.0.1 --secure-port=20259 --leader-elect=false --profiling=false
}

_tb_kc_kubelet_config() {
  local p=$TB_KC_STATE/pki
  cat >"$TB_KC_STATE/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $TB_KC_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 20248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$p/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$p/kubelet-serving.crt"
tlsPrivateKeyFile: "$p/kubelet-serving.key"
rotateCertificates: false
serverTLSBootstrap: false
containerRuntimeEndpoint: "unix://$TB_KC_CTR_SOCK"
# cgroup v1 (hybrid) without systemd: 1.35 refuses v1 unless told; cgroupfs; a root of our own.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: "/$TB_KC_CGROUP"
cgroupsPerQOS: true
failSwapOn: false
protectKernelDefaults: false
oomScoreAdj: 0
podLogsDir: "$TB_KC_STATE/pod-logs"
volumePluginDir: "$TB_KC_STATE/volume-plugins"
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
nodeStatusUpdateFrequency: 2s
maxPods: 110
YAML
}

# The kubelet in a mount namespace of its own (see the top of this section): its root dir is made a
# shared bind mount first, so that what it mounts there propagates to the host's namespace.
_tb_kc_start_kubelet() {
  local d=$TB_KC_KUBELET_DIR
  mkdir -p "$d" "$TB_KC_STATE/pod-logs" "$TB_KC_STATE/fixed/device-plugins" "$TB_KC_STATE/fixed/containers" \
    /var/lib/kubelet/device-plugins /var/log/containers
  mountpoint -q "$d" || mount --bind "$d" "$d"
  mount --make-shared "$d"
  _tb_kc_kubelet_config
  # shellcheck disable=SC2016
  _tb_kc_spawn kubelet unshare -m --propagation unchanged sh -c \
    'mount --make-private / && mount --bind "$1/device-plugins" /var/lib/kubelet/device-plugins &&
     mount --bind "$1/containers" /var/log/containers && shift && exec "$@"' sh "$TB_KC_STATE/fixed" \
    "$TB_KC_BIN/kubelet" --config="$TB_KC_STATE/kubelet-config.yaml" --kubeconfig="$TB_KC_STATE/kubelet.kubeconfig" \
    --hostname-override="$TB_KC_NODE" --node-ip="$TB_KC_NODE_IP" --root-dir="$d" --cert-dir="$d/pki"
}

_tb_kc_start_proxy() {
  _tb_kc_spawn kube-proxy "$TB_KC_BIN/kube-proxy" \
    --kubeconfig="$TB_KC_STATE/kube-proxy.kubeconfig" --hostname-override="$TB_KC_NODE" --proxy-mode=iptables \
    --cluster-cidr="$TB_KC_POD_CIDR" --bind-address=127.0.0.1 \
    --healthz-bind-address=127.0.0.1:20256 --metrics-bind-address=127.0.0.1:20249 \
    --nodeport-addresses="$TB_KC_NODE_IP/32" --conntrack-max-per-core=0 --conntrack-min=0 \
    --conntrack-tcp-timeout-established=0s --conntrack-tcp-timeout-close-wait=0s
}

# kube-router only as the NetworkPolicy firewall (iptables + ipset); no routing, no service proxy,
# no CNI config of its own, no health or metrics listener.
_tb_kc_start_kube_router() {
  _tb_kc_spawn kube-router "$TB_KC_BIN/kube-router" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --kubeconfig="$TB_KC_STATE/kube-router.kubeconfig" --hostname-override="$TB_KC_NODE" \
    --service-cluster-ip-range="$TB_KC_SERVICE_CIDR" --health-port=0 --metrics-port=0
}

_tb_kc_node_ready() {
  [[ $(_tb_kc_kubectl get node "$TB_KC_NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
_tb_kc_firewall_ready() { _tb_kc_ns iptables -w 5 -S KUBE-ROUTER-FORWARD >/dev/null 2>&1; }
_tb_kc_all_alive() {
  local d
  for d in "${TB_KC_DAEMONS[@]}"; do tb_pid_alive "k135-$d" || return 1; done
}

# --- up, check, down, status ------------------------------------------------------------------------

tb_kc_up() {
  local b t0; t0=$(tb_now)
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl etcd containerd \
    containerd-shim-runc-v2 ctr runc crictl kube-router; do
    [[ -x $TB_KC_BIN/$b ]] || { tb_say "kubernetes: $b not built (scripts/testbed build kubernetes)"; return 1; }
  done
  # ipset for kube-router; conntrack for kube-proxy; socat for the relays.
  tb_apt_install ipset conntrack socat curl openssl iptables
  if _tb_kc_all_alive && _tb_kc_node_ready; then tb_say "kubernetes already up (node $TB_KC_NODE Ready)"; return 0; fi
  # Read by scripts/testbed: the up that starts the cluster runs its check.
  TB_KC_STARTED=1
  # The isolated check of the previous step kept its state in check/: gone with the cluster.
  [[ -d $TB_KC_DIR/check ]] && rm -rf "$TB_KC_DIR/check"
  mkdir -p "$TB_KC_STATE"
  _tb_kc_save_host
  _tb_kc_netns_up
  _tb_kc_link_up
  _tb_kc_git_relay_up
  _tb_kc_cgroups_up
  _tb_kc_pki
  tb_step "kubernetes: registry relay + containerd" eval '_tb_kc_relays_up && _tb_kc_start_containerd'
  tb_step "kubernetes: etcd + kube-apiserver" eval '_tb_kc_start_etcd && _tb_kc_start_apiserver'
  _tb_kc_api_relay_up
  _tb_kc_pod_api_relay_up
  _tb_kc_bootstrap_objects
  _tb_kc_start_controllers
  _tb_kc_start_kubelet
  _tb_kc_start_proxy
  tb_step "kubernetes: node $TB_KC_NODE Ready" tb_wait_for "node Ready" 180 _tb_kc_node_ready || _tb_kc_fail "node Ready" kubelet
  # kube-router looks its Node up once at start, and gives up if the kubelet has not registered it yet.
  _tb_kc_start_kube_router
  tb_wait_for "kube-router's firewall chains" 60 _tb_kc_firewall_ready || _tb_kc_fail kube-router kube-router
  tb_wait_for "default ServiceAccount" 60 _tb_kc_kubectl -n default get serviceaccount default || _tb_kc_fail "default ServiceAccount" kube-controller-manager
  for b in "${TB_KC_DAEMONS[@]}"; do tb_pid_alive "k135-$b" || _tb_kc_fail "$b" "$b"; done
  tb_say "kubernetes up in $(awk -v a="$t0" -v b="$(tb_now)" 'BEGIN{printf "%.1fs", b-a}'): https://127.0.0.1:$TB_KC_API_PORT (in netns $TB_KC_NETNS and on the host's loopback), KUBECONFIG=$TB_KC_KUBECONFIG"
}

# --- the check: what the cluster must do for the sessions --------------------------------------------

TB_KC_CHECK_NS=k135-check

_tb_kc_pod() { # NAME ROLE IMAGE [CLAIM]: a pod shaped like a session pod (restricted), serving :8080,
  # its /workspace on CLAIM (a PVC of the default StorageClass) or an emptyDir
  local ws="emptyDir: {}"
  [[ -n ${4:-} ]] && ws="persistentVolumeClaim: {claimName: $4}"
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $TB_KC_CHECK_NS, labels: {k135-check: "true", role: $2}}
spec:
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: adapter
    image: $3
    imagePullPolicy: IfNotPresent
    ports: [{name: adapter, containerPort: 8080, protocol: TCP}]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
    readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 1}
    volumeMounts: [{name: workspace, mountPath: /workspace}, {name: tmp, mountPath: /tmp}]
  volumes:
  - {name: workspace, $ws}
  - {name: tmp, emptyDir: {medium: Memory, sizeLimit: 64Mi}}
YAML
}

# _tb_kc_reach FROM-POD IP: does an HTTP GET of IP:8080/readyz from that pod answer (3 s)?
# _tb_kc_reach FROM-POD IP[:PORT]: an HTTP GET of IP:PORT/readyz (port 8080 if none) from that pod (3 s). Prints "reach" or
# "blocked (<error code>)"; fails if the probe itself could not run. (node, not the image's busybox
# wget: that one answers, then dies of SIGSEGV on exit, code 139.)
_tb_kc_reach() {
  local rc=0 out
  out=$(_tb_kc_kubectl -n "$TB_KC_CHECK_NS" exec "$1" -- node -e "$(_tb_kc_reach_js "$2")" 2>"$TB_KC_STATE/probe.err") || rc=$?
  case $rc in
    0) echo reach ;;
    1) echo "blocked ($out)" ;;
    *) echo "probe failed ($rc): $(cat "$TB_KC_STATE/probe.err")"; return 1 ;;
  esac
}
_tb_kc_reach_js() {
  local to=$1; [[ $to == *:* ]] || to=$to:8080
  echo "fetch('http://$to/readyz', {signal: AbortSignal.timeout(3000)}).then(r => process.exit(r.ok ? 0 : 2),
    e => { console.log(e.cause?.code ?? e.name); process.exit(1); })"
}
# _tb_kc_host_reach IP:PORT: the same from the host (the runner's side), through the host link.
_tb_kc_host_reach() {
  local rc=0
  curl -fsS -o /dev/null -m 3 "http://$1/readyz" 2>/dev/null || rc=$?
  case $rc in 0) echo reach ;; 7 | 28) echo "blocked (curl $rc)" ;; *) echo "probe failed (curl $rc)"; return 1 ;; esac
}
_tb_kc_host_reach_ok() { [[ $(_tb_kc_host_reach "$1") == reach ]]; }
_tb_kc_host_expect() { # WANT HOW IP:PORT
  local got; got=$(_tb_kc_host_reach "$3") || true
  if [[ $got != "$1"* ]]; then tb_say "FAILED: host -> $2 ($3): $got, wanted $1"; return 1; fi
  tb_say "  host -> $2 ($3): $got, as wanted"
}
_tb_kc_unreachable() { [[ $(_tb_kc_reach "$@") == blocked* ]]; }
_tb_kc_pod_ip() { _tb_kc_kubectl -n "$TB_KC_CHECK_NS" get pod "$1" -o 'jsonpath={.status.podIP}'; }
_tb_kc_expect() { # WANT(reach|blocked) FROM TO-NAME TO-IP
  local got t0; t0=$(tb_now)
  got=$(_tb_kc_reach "$2" "$4") || true
  if [[ $got != "$1"* ]]; then tb_say "FAILED: $2 -> $3 ($4:8080): $got, wanted $1"; return 1; fi
  tb_say "  $2 -> $3 ($4:8080): $got, as wanted ($(awk -v a="$t0" -v b="$(tb_now)" 'BEGIN{printf "%.1fs", b-a}'))"
}

# tb_kc_check: on the running cluster, in a namespace enforcing Pod Security "restricted":
#  1. a privileged pod is refused by admission;
#  2. three pods of the reference session image (pulled by registry digest through the relay) Ready;
#  3. NetworkPolicy, enforced by kube-router: before any policy every pod reaches every other; with
#     a policy shaped like the session's (infra/kubernetes/manifests.ts: ingress on 8080 only from
#     the runner's pods; egress only DNS and the Agent's allowed endpoint as an ipBlock/32:port) on
#     `session`, `runner` still reaches it, `other` no longer does; `session` reaches its allowed
#     endpoint (`runner`'s :8080) but not `other`.
tb_kc_check() {
  local image out t0
  _tb_kc_node_ready || { tb_say "kubernetes is not up (scripts/testbed up kubernetes)"; return 1; }
  image=$(jq -r .image "$TB_STATE/reference-image.json" 2>/dev/null) || true
  [[ $image == *@sha256:* ]] || { tb_say "no reference image recorded (scripts/testbed up image)"; return 1; }
  _tb_kc_kubectl delete namespace "$TB_KC_CHECK_NS" --ignore-not-found --wait=true >/dev/null
  _tb_kc_kubectl apply -f - >/dev/null <<NS
apiVersion: v1
kind: Namespace
metadata:
  name: $TB_KC_CHECK_NS
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
NS
  tb_wait_for "default ServiceAccount in $TB_KC_CHECK_NS" 30 _tb_kc_kubectl -n "$TB_KC_CHECK_NS" get serviceaccount default
  if out=$(_tb_kc_kubectl -n "$TB_KC_CHECK_NS" run bad --image="$TB_KC_PAUSE_IMAGE" --privileged 2>&1); then
    tb_say "FAILED: a privileged pod was admitted in a restricted namespace: $out"; return 1
  fi
  [[ $out == *'violates PodSecurity "restricted'* ]] || { tb_say "FAILED: privileged pod refused, but not by Pod Security: $out"; return 1; }
  tb_say "proved: Pod Security \"restricted\" refuses a privileged pod: ${out:0:160}..."
  t0=$(tb_now)
  { printf 'apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: workspace, namespace: %s}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 64Mi}}}\n---\n' "$TB_KC_CHECK_NS"
    _tb_kc_pod session session "$image" workspace; echo ---; _tb_kc_pod runner runner "$image"; echo ---; _tb_kc_pod other other "$image"; } |
    _tb_kc_kubectl apply -f - >/dev/null
  _tb_kc_kubectl -n "$TB_KC_CHECK_NS" wait --for=condition=Ready pod -l k135-check=true --timeout=180s >/dev/null ||
    { _tb_kc_kubectl -n "$TB_KC_CHECK_NS" describe pods | tail -40 >&2; tb_say "FAILED: check pods not Ready"; return 1; }
  tb_say "proved: 3 restricted pods of $image Ready in $(awk -v a="$t0" -v b="$(tb_now)" 'BEGIN{printf "%.1fs", b-a}') (admitted, pulled by digest, CNI addresses, readiness probes):"
  _tb_kc_kubectl -n "$TB_KC_CHECK_NS" get pods -o wide | sed 's/^/  /' >&2
  # The session's workspace is its PVC, written by the adapter (uid 65532) and seen on the host.
  local pv; pv=$(_tb_kc_kubectl get pv "$(_tb_kc_kubectl -n "$TB_KC_CHECK_NS" get pvc workspace -o 'jsonpath={.spec.volumeName}')" -o 'jsonpath={.spec.hostPath.path}')
  if ! _tb_kc_kubectl -n "$TB_KC_CHECK_NS" exec session -- sh -c 'echo k135 >/workspace/probe' || [[ $(cat "$pv/probe" 2>/dev/null) != k135 ]]; then
    tb_say "FAILED: the session pod cannot write its PVC ($pv)"; return 1
  fi
  tb_say "proved: a dynamic PVC (StorageClass standard, hostPath provisioner) bound and written by the non-root pod: $pv ($(stat -c '%a %U' "$pv"))"
  # In-cluster clients (the control plane's runner) reach the API server through the `kubernetes`
  # Service (_tb_kc_pod_api_relay_up), its certificate naming the Service IP: verified against the
  # cluster CA by a pod without a token (anonymous may read /readyz).
  local api=${TB_KC_SERVICE_CIDR%.0/*}.1 got
  got=$(_tb_kc_kubectl -n "$TB_KC_CHECK_NS" exec other -- node -e "require('https').get({host: '$api', port: 443,
    path: '/readyz', ca: process.argv[1], timeout: 3000}, (r) => { console.log(r.statusCode); process.exit(r.statusCode === 200 ? 0 : 2) })
    .on('timeout', function () { this.destroy(new Error('timeout')) }).on('error', (e) => { console.log(e.code ?? e.message); process.exit(1) })" \
    -- "$(cat "$TB_KC_STATE/pki/ca.crt")" 2>&1) || { tb_say "FAILED: other -> the kubernetes Service https://$api/readyz: $got"; return 1; }
  tb_say "proved: a pod reaches the API server through the kubernetes Service (https://$api -> $TB_KC_NODE_IP:$TB_KC_API_PORT, the relay), TLS verified against the cluster CA: /readyz $got"
  local s r o
  s=$(_tb_kc_pod_ip session) r=$(_tb_kc_pod_ip runner) o=$(_tb_kc_pod_ip other)
  _tb_kc_kubectl -n "$TB_KC_CHECK_NS" create service clusterip session --tcp=8080:8080 --dry-run=client -o yaml |
    sed 's/app: session/role: session/' | _tb_kc_kubectl apply -f - >/dev/null
  local svc; svc=$(_tb_kc_kubectl -n "$TB_KC_CHECK_NS" get service session -o 'jsonpath={.spec.clusterIP}')
  # A new Service answers once kube-proxy has written its rules (its next sync, ~1 s): asked at
  # once, the host's curl was refused (7) twice. Waited for here; the check below still decides.
  tb_wait_for "kube-proxy's rules for Service session ($svc)" 20 _tb_kc_host_reach_ok "$svc:8080" || true
  tb_say "no policy yet: every pod reaches every other, the host reaches pods and ClusterIPs through its link"
  _tb_kc_expect reach other session "$s" && _tb_kc_expect reach session other "$o" &&
    _tb_kc_host_expect reach "session's pod IP" "$s:8080" && _tb_kc_host_expect reach "Service session" "$svc:8080" || return 1
  _tb_kc_kubectl apply -f - >/dev/null <<NP
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: session, namespace: $TB_KC_CHECK_NS}
spec:
  podSelector: {matchLabels: {role: session}}
  policyTypes: [Ingress, Egress]
  ingress:
  - from: [{podSelector: {matchLabels: {role: runner}}}]
    ports: [{port: 8080, protocol: TCP}]
  egress:
  - to: [{namespaceSelector: {}}]
    ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]
  - to: [{ipBlock: {cidr: $r/32}}]
    ports: [{port: 8080, protocol: TCP}]
NP
  t0=$(tb_now)
  tb_wait_for "kube-router to enforce the policy" 60 _tb_kc_unreachable other "$s" || { tb_say "FAILED: policy not enforced"; return 1; }
  tb_say "policy 'session' applied (ingress :8080 from role=runner only; egress DNS + $r/32:8080), enforced within $(awk -v a="$t0" -v b="$(tb_now)" 'BEGIN{printf "%.1fs", b-a}'):"
  _tb_kc_expect reach runner session "$s" && _tb_kc_expect blocked other session "$s" &&
    _tb_kc_expect reach session runner "$r" && _tb_kc_expect blocked session other "$o" || return 1
  _tb_kc_host_expect blocked "session's pod IP (policy without runnerCidr)" "$s:8080" || return 1
  # As infra/kubernetes/manifests.ts does with spec.kubernetes.runnerCidr: the runner on the host, by
  # the host link's address.
  _tb_kc_kubectl -n "$TB_KC_CHECK_NS" patch networkpolicy session --type=json \
    -p "[{\"op\": \"add\", \"path\": \"/spec/ingress/0/from/-\", \"value\": {\"ipBlock\": {\"cidr\": \"$TB_KC_LINK_HOST_IP/32\"}}}]" >/dev/null
  tb_wait_for "kube-router to admit the host link" 60 _tb_kc_host_reach_ok "$s:8080" || { tb_say "FAILED: runnerCidr not admitted"; return 1; }
  tb_say "policy 'session' + ingress from ipBlock $TB_KC_LINK_HOST_IP/32 (runnerCidr: the host link):"
  _tb_kc_host_expect reach "session's pod IP" "$s:8080" && _tb_kc_host_expect reach "Service session" "$svc:8080" &&
    _tb_kc_expect blocked other session "$s" || return 1
  tb_say "proved: NetworkPolicy enforced by kube-router (denied ingress and egress fail, allowed ones answer; the host's runner is admitted by runnerCidr only)"
  local before; before=$(_tb_kc_guard_refused)
  got=$(_tb_kc_reach other "$TB_KC_LINK_HOST_IP:${TB_REGISTRY#*:}") || true
  [[ $got == blocked*EHOSTUNREACH* && $(_tb_kc_guard_refused) -gt $before ]] ||
    { tb_say "FAILED: other -> the host link $TB_KC_LINK_HOST_IP:${TB_REGISTRY#*:}: $got (guard count $before -> $(_tb_kc_guard_refused))"; return 1; }
  tb_say "proved: a pod cannot open a connection to the host through the link: other -> $TB_KC_LINK_HOST_IP:${TB_REGISTRY#*:}: $got (refused by $TB_KC_GUARD, $(_tb_kc_guard_refused) packet(s) since up)"
  # The namespace routes nothing beyond its bridge: a pod without any policy cannot reach the host's
  # own addresses (here its registry's port; a refusal would mean the packet got there).
  local host_ip
  host_ip=$(ip -4 -o addr show scope global | awk '{print $4; exit}' | cut -d/ -f1)
  if [[ -n $host_ip ]]; then
    got=$(_tb_kc_reach other "$host_ip:${TB_REGISTRY#*:}") || true
    [[ $got == blocked* && $got != *ECONNREFUSED* ]] || { tb_say "FAILED: other -> host $host_ip:${TB_REGISTRY#*:}: $got, wanted no route"; return 1; }
    tb_say "proved: a pod reaches nothing beyond the bridge: other -> the host's $host_ip:${TB_REGISTRY#*:}: $got"
  fi
  _tb_kc_kubectl delete namespace "$TB_KC_CHECK_NS" --wait=false >/dev/null
}

tb_kc_down() {
  local d pid h m
  ip netns list 2>/dev/null | grep -qw "$TB_KC_NETNS" || compgen -G "$TB_RUN/k135-*.pid" >/dev/null ||
    ip link show "$TB_KC_LINK_HOST" >/dev/null 2>&1 || iptables -w 10 -nL "$TB_KC_GUARD" >/dev/null 2>&1 ||
    [[ -d $TB_KC_KUBELET_DIR || -f $TB_STATE/kubernetes-current-host || -d $TB_KC_DIR/check ]] || return 0
  # The kubelet first (else it restarts what goes), then every pod sandbox through the CRI (CNI DEL
  # releases the address, the pod's netns goes), then the daemons.
  tb_stop_pid k135-kubelet
  if tb_pid_alive k135-containerd; then
    _tb_kc_crictl rmp -fa >/dev/null 2>&1 || true
    for d in $(_tb_kc_ctr -n k8s.io containers ls -q 2>/dev/null); do
      _tb_kc_ctr -n k8s.io task kill -s KILL "$d" >/dev/null 2>&1 || true
      _tb_kc_ctr -n k8s.io task rm -f "$d" >/dev/null 2>&1 || true
      _tb_kc_ctr -n k8s.io containers rm "$d" >/dev/null 2>&1 || true
    done
  fi
  # SIGTERM to all at once (each takes ~2 s to be gone here), then wait for each.
  local pids=()
  for d in "${TB_KC_DAEMONS[@]}"; do
    tb_pid_alive "k135-$d" || continue
    pid=$(cat "$TB_RUN/k135-$d.pid")
    # A relay's per-connection children (host side: not in the namespace).
    for m in $(ps -o pid= --ppid "$pid" 2>/dev/null); do kill -9 "$m" 2>/dev/null || true; done
    pids+=("$pid"); kill "$pid" 2>/dev/null || true
  done
  ((${#pids[@]})) && tb_say "stopping kubernetes daemons (pids ${pids[*]})"
  for d in "${TB_KC_DAEMONS[@]}"; do tb_stop_pid "k135-$d"; done
  # Any process still in the namespace was started by those daemons (a shim, a relay child): by PID.
  for pid in $(ip netns pids "$TB_KC_NETNS" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  # And any still in our cgroups (a container whose shim went first).
  for h in /sys/fs/cgroup/*/"$TB_KC_CGROUP"; do
    [[ -d $h ]] || continue
    find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done
  done
  _tb_kc_link_down
  ip netns del "$TB_KC_NETNS" 2>/dev/null || true
  # Mounts under our state (the kubelet's root dir bind and pod volumes, overlay rootfs, pod netns), deepest first.
  awk -v d="$TB_KC_STATE" '$2==d || index($2, d "/")==1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  for h in /sys/fs/cgroup/*/"$TB_KC_CGROUP"; do
    if [[ -d $h ]]; then find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
  done
  _tb_kc_restore_host
  # containerd 2.2 with NRI on (the previous step's check) left its socket; ours runs with NRI off.
  if [[ -S /var/run/nri/nri.sock ]] && ! ss -xl 2>/dev/null | grep -q /var/run/nri/nri.sock; then rm -f /var/run/nri/nri.sock; rmdir /var/run/nri 2>/dev/null || true; fi
  # State (a fresh cluster on each up); kept: certificates, kubeconfigs, containerd's image store.
  rm -rf "$TB_KC_STATE/containerd/state" "$TB_KC_STATE/etcd" "$TB_KC_KUBELET_DIR" "$TB_KC_STATE/pod-logs" "$TB_KC_STATE/fixed" \
    "$TB_KC_STATE/cni-ipam" "$TB_KC_STATE/kubectl-cache" "$TB_KC_STATE/volume-plugins" "$TB_KC_DIR/check"
  rm -f "$TB_KC_CTR_SOCK" "$TB_KC_CTR_SOCK.ttrpc" "$TB_RUN/k135-registry.sock" "$TB_RUN/k135-api.sock"
  # Dynamic PVs (their objects went with etcd's data).
  rm -rf "/tmp/$TB_KC_PV_BASE"
  tb_say "kubernetes down"
}

tb_kc_cluster_status() {
  local d any=
  for d in "${TB_KC_DAEMONS[@]}"; do
    if tb_pid_alive "k135-$d"; then any=1; printf '  %-23s running (pid %s), log %s\n' "$d" "$(cat "$TB_RUN/k135-$d.pid")" "$TB_LOG/k135-$d.log"; fi
  done
  [[ -n $any ]] || { echo "  cluster not running (scripts/testbed up kubernetes)"; return 0; }
  echo "  API https://127.0.0.1:$TB_KC_API_PORT (netns $TB_KC_NETNS and host loopback), KUBECONFIG=$TB_KC_KUBECONFIG"
  if _tb_kc_node_ready; then
    echo "  node $(_tb_kc_kubectl get node "$TB_KC_NODE" -o 'jsonpath={.metadata.name} Ready, kubelet {.status.nodeInfo.kubeletVersion}, {.status.nodeInfo.containerRuntimeVersion}, kernel {.status.nodeInfo.kernelVersion}')"
  else echo "  node $TB_KC_NODE not Ready"; fi
  echo "  host link $TB_KC_LINK_HOST $TB_KC_LINK_HOST_IP <-> $TB_KC_LINK_NS $TB_KC_LINK_NS_IP; host routes: $(ip route show dev "$TB_KC_LINK_HOST" 2>/dev/null | awk '$2=="via"{print $1}' | paste -sd' '); refused from it since up: $(_tb_kc_guard_refused) packet(s) ($TB_KC_GUARD)"
  echo "  netns $TB_KC_NETNS links: $(ip -n "$TB_KC_NETNS" -br link 2>/dev/null | awk '{print $1}' | grep -vc '^veth') non-veth ($(ip -n "$TB_KC_NETNS" -br link 2>/dev/null | awk '$1 !~ /^veth/{print $1}' | paste -sd' ')), $(ip -n "$TB_KC_NETNS" -br link 2>/dev/null | grep -c '^veth') pod veths; routes: $(ip -n "$TB_KC_NETNS" route 2>/dev/null | paste -sd';')"
}
