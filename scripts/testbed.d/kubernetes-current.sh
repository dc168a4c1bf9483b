# shellcheck shell=bash
# A current Kubernetes for the test bed (issue 19; TESTBED.md "A current Kubernetes"), built with
# the machine's Go from the Go module proxy: Kubernetes 1.35, containerd 2, runc, the CNI plugins,
# crictl, etcd 3.6 and kube-router. Not part of the default `scripts/testbed up` yet (the 1.20
# cluster of kubernetes.sh stays the one the tests use); see KUBERNETES-CURRENT.md beside this file
# for what was learned and what the next step is. Sourced after common.sh. Never run directly.
#
#   scripts/testbed build kubernetes-current   build (no test-bed lock taken; its own lock)
#   scripts/testbed up kubernetes-current      build, then the isolated check below
#   scripts/testbed down kubernetes-current    stop the check, remove its network namespace
#
# Layout under $TB_HOME/kubernetes-$TB_KC_VERSION:
#   bin/        kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
#               containerd containerd-shim-runc-v2 ctr runc crictl etcd etcdctl kube-router
#   cni/bin/    bridge host-local loopback portmap (containerd's CNI bin_dir)
#   check/      the isolated check's state: containerd root/state, etcd data, pki, logs
# Wrapper modules in $TB_SRC/kubernetes-current/{kubernetes,etcd}; Go build cache of its own in
# $TB_HOME/gocache-kubernetes-current (same Go as common.sh's, kept apart so it can be measured
# and trimmed without touching the Pulumi builds' cache); modules in the shared GOMODCACHE.
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
  local name=$1 t0; shift
  t0=$(tb_now)
  tb_step "kubernetes-current: $name" "$@"
  printf '%s %s %s\n' "$(date -u +%FT%TZ)" "$name" "$(awk -v a="$t0" -v b="$(tb_now)" 'BEGIN{printf "%.1f", b-a}')" >>"$TB_KC_TIMES"
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

_tb_kc_kube_build_one() {
  local name=$1 log=$TB_LOG/kubernetes-current-build-$1.log
  (cd "$TB_KC_SRC/kubernetes" && CGO_ENABLED=0 _tb_kc_go build -p "$TB_KC_GO_P" -trimpath \
    -tags selinux,notest,grpcnotrace -ldflags "$(_tb_kc_kube_ldflags)" \
    -o "$TB_KC_BIN/$name.new" "k8s.io/kubernetes/cmd/$name") >"$log" 2>&1 || _tb_kc_log_fail "build $name" "$log"
  mv -f "$TB_KC_BIN/$name.new" "$TB_KC_BIN/$name"
}

_tb_kc_build_kubernetes() {
  local b recipe
  recipe="kubernetes v$TB_KC_VERSION $(go env GOVERSION) tags=selinux,notest,grpcnotrace cgo=0"
  for b in "${TB_KC_KUBE_BINARIES[@]}"; do
    _tb_kc_fresh "$b" "$recipe" "$TB_KC_BIN/$b" && continue
    [[ -f $TB_KC_SRC/kubernetes/go.sum ]] || _tb_kc_timed "kubernetes wrapper module (go get)" _tb_kc_kube_module
    _tb_kc_timed "$b v$TB_KC_VERSION" _tb_kc_kube_build_one "$b"
    _tb_kc_done "$b" "$recipe"
  done
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
  recipe="etcd v$TB_KC_ETCD_VERSION $(go env GOVERSION) cgo=0"
  _tb_kc_fresh etcd "$recipe" "$TB_KC_BIN/etcd" "$TB_KC_BIN/etcdctl" && return 0
  _tb_kc_etcd_module
  local m
  for m in server etcdctl; do
    (cd "$TB_KC_SRC/etcd" && CGO_ENABLED=0 _tb_kc_go build -p "$TB_KC_GO_P" -trimpath -ldflags "-s -w" \
      -o "$TB_KC_BIN/$([[ $m == server ]] && echo etcd || echo etcdctl)" "go.etcd.io/etcd/$m/v3") >"$log" 2>&1 ||
      _tb_kc_log_fail "build etcd ($m)" "$log"
  done
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
  command -v go >/dev/null || { tb_say "kubernetes-current needs the machine's go (not found)"; return 1; }
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
      *) tb_say "kubernetes-current: unknown component '$c' (kubernetes etcd containerd runc cni crictl kube-router)"; exec 8>&-; return 2 ;;
    esac || { exec 8>&-; return 1; }
  done
  exec 8>&-
  tb_say "kubernetes-current build (${comps[*]}) in $((SECONDS - t0))s; binaries in $TB_KC_BIN"
}

# --- status -----------------------------------------------------------------------------------------

tb_kc_status() {
  local b first
  if [[ ! -d $TB_KC_BIN ]]; then echo "kubernetes-current not built (scripts/testbed build kubernetes-current)"; return 0; fi
  echo "kubernetes-current (not the default cluster yet), in $TB_KC_BIN"
  _tb_kc_v() { # NAME CMD...: first line of CMD's output, or "missing"
    local name=$1; shift
    if [[ -x $1 ]]; then first=$("$@" 2>&1 | head -1); printf '  %-23s %s\n' "$name" "$first"; else printf '  %-23s missing\n' "$name"; fi
  }
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do _tb_kc_v "$b" "$TB_KC_BIN/$b" --version; done
  _tb_kc_v kubectl "$TB_KC_BIN/kubectl" version --client
  _tb_kc_v containerd "$TB_KC_BIN/containerd" --version
  if [[ -x $TB_KC_BIN/containerd-shim-runc-v2 ]]; then
    printf '  %-23s %s\n' containerd-shim-runc-v2 "$("$TB_KC_BIN/containerd-shim-runc-v2" -v 2>&1 | awk '/Version:/{print $2; exit}')"
  else printf '  %-23s missing\n' containerd-shim-runc-v2; fi
  _tb_kc_v runc "$TB_KC_BIN/runc" --version
  _tb_kc_v crictl "$TB_KC_BIN/crictl" --version
  _tb_kc_v etcd "$TB_KC_BIN/etcd" --version
  _tb_kc_v kube-router "$TB_KC_BIN/kube-router" --version
  # A CNI plugin run without CNI_COMMAND prints its name and version.
  for b in "${TB_KC_CNI_PLUGINS[@]}"; do _tb_kc_v "cni ${b#*/}" "$TB_KC_CNI_BIN/${b#*/}"; done
  if declare -F tb_kc_check_status >/dev/null; then tb_kc_check_status; fi
}

# --- the isolated check ------------------------------------------------------------------------------
#
# Proves the binaries run without touching the 1.20 cluster that shares this machine: everything
# lives in its own network namespace $TB_KC_NETNS (only its own loopback: no route anywhere, and
# 127.0.0.1:6443/2379 there are not the host's), on ports of its own even so, with containerd's
# root, state and socket of its own, and containers in the cgroup /$TB_KC_NETNS of each hierarchy.
# Started: containerd (CRI plugin loaded: crictl info), one container from a pause image built
# here and imported as an OCI archive (runc, shim, overlayfs, seccomp), etcd 3.6 and kube-apiserver
# 1.35 (/readyz), and Pod Security admission refusing a privileged pod in a namespace labelled
# `restricted` while passing a compliant one (server-side dry run: no kubelet here).

TB_KC_NETNS=as-k135
TB_KC_CHECK=$TB_KC_DIR/check
TB_KC_PAUSE_TAG=3.10.1
TB_KC_PAUSE_IMAGE=registry.k8s.io/pause:$TB_KC_PAUSE_TAG
TB_KC_ETCD_PORT=22379
TB_KC_API_PORT=16443
TB_KC_CHECK_DAEMONS=(kube-scheduler kube-controller-manager kube-apiserver etcd containerd)
TB_KC_CTR_SOCK=$TB_RUN/k135-containerd.sock

# nsenter --net, not `ip netns exec`: the latter also makes a mount namespace with a fresh /sys,
# which hides /sys/fs/cgroup from runc (and would keep containerd's mounts from a kubelet).
_tb_kc_ns() { nsenter --net="/run/netns/$TB_KC_NETNS" "$@"; }
_tb_kc_ctr() { "$TB_KC_BIN/ctr" --address "$TB_KC_CTR_SOCK" "$@"; }
_tb_kc_kubectl() { _tb_kc_ns "$TB_KC_BIN/kubectl" --kubeconfig "$TB_KC_CHECK/admin.kubeconfig" --cache-dir "$TB_KC_CHECK/kubectl-cache" "$@"; }

# _tb_kc_spawn NAME CMD...: a daemon inside the network namespace, pid in $TB_RUN/k135-NAME.pid.
# fd 8 and 9 are build and test-bed locks: a daemon must not keep them.
_tb_kc_spawn() {
  local name=k135-$1; shift
  tb_pid_alive "$name" && return 0
  rm -f "$TB_RUN/$name.pid"
  # shellcheck disable=SC2016
  setsid env -i PATH="$TB_KC_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$TB_KC_CHECK" LANG=C.UTF-8 \
    nsenter --net="/run/netns/$TB_KC_NETNS" sh -c 'echo $$ >"$0" && exec "$@"' "$TB_RUN/$name.pid" "$@" \
    >>"$TB_LOG/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  tb_wait_for "$name pid file" 10 test -s "$TB_RUN/$name.pid"
}

# The pause binary from the Kubernetes module's own source, as an OCI image archive (no registry,
# no dockerd): one layer holding /pause, run as 65535.
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

# containerd 2 config (version 3 schema): cgroupfs (SystemdCgroup = false: no systemd here), our runc, our CNI plugins.
_tb_kc_containerd_config() {
  local c=$TB_KC_CHECK/containerd
  mkdir -p "$c/root" "$c/state" "$c/cni-conf"
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
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$TB_KC_PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # Root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj (the kubelet asks -998 for every
  # sandbox) fails in runc; this clamps it to containerd's own (0), as the 1.20 runc wrapper did.
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
    conf_dir = "$c/cni-conf"
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
}

_tb_kc_cert() { # NAME SUBJECT [SANS]
  local name=$1 subj=$2 sans=${3:-} p=$TB_KC_CHECK/pki
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/$name.key" 2>/dev/null
  openssl req -new -key "$p/$name.key" -subj "$subj" -out "$p/$name.csr" 2>/dev/null
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n $sans ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$sans"
    else echo "extendedKeyUsage=clientAuth"; fi; } >"$p/$name.ext"
  openssl x509 -req -in "$p/$name.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 3650 \
    -extfile "$p/$name.ext" -out "$p/$name.crt" 2>/dev/null
  rm -f "$p/$name.csr" "$p/$name.ext"
}

_tb_kc_pki() {
  local p=$TB_KC_CHECK/pki
  [[ -f $p/complete ]] && return 0
  rm -rf "$p"; mkdir -p "$p"; chmod 700 "$p"
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$p/ca.key" -subj "/CN=agent-sessions-k135-ca" -days 3650 -out "$p/ca.crt" 2>/dev/null
  _tb_kc_cert apiserver "/CN=kube-apiserver" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost,IP:127.0.0.1,IP:10.215.0.1"
  _tb_kc_cert admin "/O=system:masters/CN=agent-sessions-admin"
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/sa.key" 2>/dev/null
  openssl ec -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  cat >"$TB_KC_CHECK/admin.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: k135
  cluster:
    server: https://127.0.0.1:$TB_KC_API_PORT
    certificate-authority-data: $(base64 -w0 "$p/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 "$p/admin.crt")
    client-key-data: $(base64 -w0 "$p/admin.key")
contexts:
- name: k135
  context: {cluster: k135, user: admin, namespace: default}
current-context: k135
KC
  chmod 600 "$TB_KC_CHECK/admin.kubeconfig"
  touch "$p/complete"
}

_tb_kc_check_containerd() {
  _tb_kc_containerd_config
  _tb_kc_spawn containerd "$TB_KC_BIN/containerd" --config "$TB_KC_CHECK/containerd/config.toml"
  tb_wait_for "containerd socket" 30 _tb_kc_ctr version || _tb_kc_log_fail containerd "$TB_LOG/k135-containerd.log"
  _tb_kc_pause_image
  _tb_kc_ctr -n k8s.io images import "$TB_KC_DIR/images/pause-$TB_KC_PAUSE_TAG.oci.tar" >/dev/null
  # A container from it: runc (with seccomp), the shim, overlayfs, cgroupfs under /$TB_KC_NETNS.
  _tb_kc_ctr -n k8s.io run -d --seccomp --cgroup "/$TB_KC_NETNS/check" "$TB_KC_PAUSE_IMAGE" k135-check >/dev/null
  tb_wait_for "k135-check running" 15 sh -c "'$TB_KC_BIN/ctr' --address '$TB_KC_CTR_SOCK' -n k8s.io task ls | grep -q 'k135-check.*RUNNING'"
  tb_say "containerd: $(_tb_kc_ctr -n k8s.io task ls | awk '$1=="k135-check"{print $1" pid "$2" "$3}') (runc $("$TB_KC_BIN/runc" --version | awk 'NR==1{print $3}'), seccomp)"
  _tb_kc_ctr -n k8s.io task kill -s KILL k135-check >/dev/null
  tb_wait_for "k135-check stopped" 15 sh -c "! '$TB_KC_BIN/ctr' --address '$TB_KC_CTR_SOCK' -n k8s.io task ls | grep -q 'k135-check.*RUNNING'"
  _tb_kc_ctr -n k8s.io task rm k135-check >/dev/null 2>&1 || true
  _tb_kc_ctr -n k8s.io containers rm k135-check >/dev/null
  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 10\n' "$TB_KC_CTR_SOCK" "$TB_KC_CTR_SOCK" >"$TB_KC_CHECK/crictl.yaml"
  "$TB_KC_BIN/crictl" --config "$TB_KC_CHECK/crictl.yaml" info >"$TB_KC_CHECK/crictl-info.json" ||
    { tb_say "crictl info failed"; return 1; }
  tb_say "crictl info: RuntimeReady=$(jq -r '.status.conditions[] | select(.type=="RuntimeReady") | .status' "$TB_KC_CHECK/crictl-info.json"), NetworkReady=$(jq -r '.status.conditions[] | select(.type=="NetworkReady") | .status' "$TB_KC_CHECK/crictl-info.json") (no CNI config in the check)"
}

_tb_kc_check_apiserver() {
  local p=$TB_KC_CHECK/pki
  _tb_kc_pki
  mkdir -p "$TB_KC_CHECK/etcd"; chmod 700 "$TB_KC_CHECK/etcd"
  _tb_kc_spawn etcd "$TB_KC_BIN/etcd" --name k135 --data-dir "$TB_KC_CHECK/etcd" \
    --listen-client-urls "http://127.0.0.1:$TB_KC_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$TB_KC_ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((TB_KC_ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((TB_KC_ETCD_PORT + 1))" \
    --initial-cluster "k135=http://127.0.0.1:$((TB_KC_ETCD_PORT + 1))" --initial-cluster-state new \
    --listen-metrics-urls "http://127.0.0.1:$((TB_KC_ETCD_PORT + 2))"
  tb_wait_for "etcd" 30 _tb_kc_ns curl -fsS "http://127.0.0.1:$TB_KC_ETCD_PORT/health" || _tb_kc_log_fail etcd "$TB_LOG/k135-etcd.log"
  _tb_kc_spawn kube-apiserver "$TB_KC_BIN/kube-apiserver" \
    --bind-address=127.0.0.1 --secure-port="$TB_KC_API_PORT" --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --etcd-servers="http://127.0.0.1:$TB_KC_ETCD_PORT" \
    --client-ca-file="$p/ca.crt" --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range=10.215.0.0/24 --allow-privileged=true --profiling=false
  tb_wait_for "kube-apiserver /readyz" 120 _tb_kc_kubectl get --raw /readyz || _tb_kc_log_fail kube-apiserver "$TB_LOG/k135-kube-apiserver.log"
  tb_say "kube-apiserver /readyz ok: $(_tb_kc_kubectl version -o json | jq -r '"server " + .serverVersion.gitVersion + ", kubectl " + .clientVersion.gitVersion')"
  # Pod Security admission (on by default): restricted on a namespace, as the sessions namespace will be.
  _tb_kc_kubectl apply -f - >/dev/null <<NS
apiVersion: v1
kind: Namespace
metadata:
  name: k135-restricted
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
---
# No controller-manager in the check: the ServiceAccount admission plugin needs the namespace's
# default ServiceAccount to exist before it lets a pod through to Pod Security.
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: k135-restricted}
NS
  local out
  if out=$(_tb_kc_kubectl -n k135-restricted run bad --image="$TB_KC_PAUSE_IMAGE" --dry-run=server --privileged 2>&1); then
    tb_say "Pod Security: a privileged pod was admitted in a restricted namespace: $out"; return 1
  fi
  [[ $out == *'violates PodSecurity "restricted'* ]] || { tb_say "privileged pod refused, but not by Pod Security: $out"; return 1; }
  tb_say "Pod Security restricted refused a privileged pod: ${out:0:200}..."
  _tb_kc_kubectl -n k135-restricted create --dry-run=server -o name -f - >/dev/null <<POD || { tb_say "Pod Security refused a compliant pod"; return 1; }
apiVersion: v1
kind: Pod
metadata: {name: good}
spec:
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65535, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: pause
    image: $TB_KC_PAUSE_IMAGE
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
POD
  tb_say "Pod Security restricted admitted a compliant pod (server-side dry run)"
}

# kube-controller-manager and kube-scheduler against the check's apiserver (admin credentials: a
# trial, not the per-component certificates a cluster gets): the token controller makes the
# default ServiceAccount, a Deployment gets its ReplicaSet and a pod (Pending: no node here).
_tb_kc_check_controllers() {
  local k=$TB_KC_CHECK/admin.kubeconfig p=$TB_KC_CHECK/pki
  _tb_kc_spawn kube-controller-manager "$TB_KC_BIN/kube-controller-manager" --kubeconfig="$k" \
    --bind-address=127.0.0.1 --secure-port=20257 --leader-elect=false --root-ca-file="$p/ca.crt" \
    --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
    --service-account-private-key-file="$p/sa.key" --use-service-account-credentials=true \
    --service-cluster-ip-range=10.215.0.0/24 --allocate-node-cidrs=false --profiling=false
  _tb_kc_spawn kube-scheduler "$TB_KC_BIN/kube-scheduler" --kubeconfig="$k" \
    --bind-address=127.0.0.1 --secure-port=20259 --leader-elect=false --profiling=false
  tb_wait_for "default ServiceAccount" 60 _tb_kc_kubectl -n default get serviceaccount default ||
    _tb_kc_log_fail kube-controller-manager "$TB_LOG/k135-kube-controller-manager.log"
  _tb_kc_kubectl create namespace k135-plain --dry-run=client -o yaml | _tb_kc_kubectl apply -f - >/dev/null
  _tb_kc_kubectl -n k135-plain create deployment web --image="$TB_KC_PAUSE_IMAGE" --dry-run=client -o yaml | _tb_kc_kubectl apply -f - >/dev/null
  tb_wait_for "the Deployment's pod" 60 _tb_kc_has_pod k135-plain ||
    _tb_kc_log_fail kube-controller-manager "$TB_LOG/k135-kube-controller-manager.log"
  tb_wait_for "scheduler healthz" 30 _tb_kc_ns curl -fsk https://127.0.0.1:20259/healthz ||
    _tb_kc_log_fail kube-scheduler "$TB_LOG/k135-kube-scheduler.log"
  tb_say "controller-manager: default ServiceAccount made, Deployment -> ReplicaSet -> pod (Pending, no node); scheduler healthy"
}
_tb_kc_has_pod() { [[ -n $(_tb_kc_kubectl -n "$1" get pods -o name 2>/dev/null) ]]; }

tb_kc_check_up() {
  local b
  for b in kube-apiserver etcd containerd containerd-shim-runc-v2 ctr runc crictl kubectl; do
    [[ -x $TB_KC_BIN/$b ]] || { tb_say "kubernetes-current: $b not built (scripts/testbed build kubernetes-current)"; return 1; }
  done
  command -v curl >/dev/null || tb_apt_install curl
  mkdir -p "$TB_KC_CHECK"
  ip netns list | grep -qw "$TB_KC_NETNS" || ip netns add "$TB_KC_NETNS"
  ip -n "$TB_KC_NETNS" link set lo up
  tb_step "kubernetes-current check: containerd + runc" _tb_kc_check_containerd
  tb_step "kubernetes-current check: etcd + kube-apiserver" _tb_kc_check_apiserver
  tb_step "kubernetes-current check: kube-controller-manager + kube-scheduler" _tb_kc_check_controllers
}

tb_kc_check_down() {
  local d pid
  [[ -n $(ip netns list 2>/dev/null | grep -w "$TB_KC_NETNS") || -f $TB_RUN/k135-containerd.pid ]] || return 0
  if tb_pid_alive k135-containerd; then
    # Tasks first, so their shims exit; then the daemons.
    local t
    for t in $(_tb_kc_ctr -n k8s.io task ls -q 2>/dev/null); do _tb_kc_ctr -n k8s.io task kill -s KILL "$t" >/dev/null 2>&1 || true; done
    sleep 0.5
    for t in $(_tb_kc_ctr -n k8s.io containers ls -q 2>/dev/null); do
      _tb_kc_ctr -n k8s.io task rm -f "$t" >/dev/null 2>&1 || true
      _tb_kc_ctr -n k8s.io containers rm "$t" >/dev/null 2>&1 || true
    done
  fi
  for d in "${TB_KC_CHECK_DAEMONS[@]}"; do tb_stop_pid "k135-$d"; done
  # Any process still in the namespace was started by those daemons (a shim): by PID.
  for pid in $(ip netns pids "$TB_KC_NETNS" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  ip netns del "$TB_KC_NETNS" 2>/dev/null || true
  # Containers' cgroups (/$TB_KC_NETNS in each v1 hierarchy), deepest first.
  local h
  for h in /sys/fs/cgroup/*/"$TB_KC_NETNS" /sys/fs/cgroup/unified/"$TB_KC_NETNS"; do
    if [[ -d $h ]]; then find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
  done
  # Mounts under the check's directory (overlay rootfs) if any leaked to the host's namespace.
  local m
  awk -v d="$TB_KC_CHECK" 'index($2, d "/")==1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$TB_KC_CHECK/containerd" "$TB_KC_CHECK/etcd" "$TB_KC_CHECK/kubectl-cache"
  rm -f "$TB_KC_CTR_SOCK" "$TB_KC_CTR_SOCK.ttrpc"
  tb_say "kubernetes-current check down"
}

tb_kc_check_status() {
  local d
  for d in "${TB_KC_CHECK_DAEMONS[@]}"; do
    if tb_pid_alive "k135-$d"; then printf '  check %-17s running (pid %s) in netns %s, log %s\n' "$d" "$(cat "$TB_RUN/k135-$d.pid")" "$TB_KC_NETNS" "$TB_LOG/k135-$d.log"; fi
  done
}
