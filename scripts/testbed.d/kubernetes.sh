# shellcheck shell=bash
# A real single-node Kubernetes 1.20 cluster (TESTBED.md "Kubernetes"), built from Debian's
# `kubernetes` source package with Debian's Go 1.19, running on loopback against our dockerd.
# Sourced after common.sh (and docker.sh, whose dockerd the kubelet uses). Never run directly.
#
# Layout under $TB_HOME/kubernetes:
#   bin/        kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl pause
#   go/         Debian golang-1.19-go + golang-1.19-src, unpacked with dpkg -x (not installed)
#   gopath/     GOPATH whose src/k8s.io/kubernetes is a symlink to the tree in $TB_SRC
#   apt/        private APT_CONFIG with a deb-src line (no change to the system's apt setup)
#   pki/        CA, serving and client certificates (openssl), service-account key
#   *.kubeconfig, etcd/ (data), kubelet/ (root dir), pv/ (hostPath PVs), images/ (build contexts)
# $TB_HOME/gocache-go1.19 is this Go's build cache, separate from common.sh's GOCACHE.

TB_KUBE_DIR=$TB_HOME/kubernetes
TB_KUBE_BIN=$TB_KUBE_DIR/bin
TB_KUBE_GOROOT=$TB_KUBE_DIR/go/usr/lib/go-1.19
TB_KUBE_GOPATH=$TB_KUBE_DIR/gopath
TB_KUBE_GOCACHE=$TB_HOME/gocache-go1.19
TB_KUBE_PKI=$TB_KUBE_DIR/pki
TB_KUBE_KUBELET_DIR=$TB_KUBE_DIR/kubelet   # the kubelet's --root-dir (state, pod volumes, mounts)
TB_KUBE_PV_DIR=/tmp/hostpath_pv            # fixed in the 1.20 hostPath provisioner's source
TB_KUBE_NODE=testbed
TB_KUBE_API_PORT=6443
TB_KUBE_API=https://127.0.0.1:$TB_KUBE_API_PORT
TB_KUBE_SERVICE_CIDR=10.214.0.0/24          # ClusterIPs (virtual; kube-proxy DNATs them to pod IPs)
TB_KUBE_STORAGECLASS=standard
TB_KUBE_GUARD=AGENT-SESSIONS-GUARD          # our filter chain hooked into OUTPUT (and FORWARD)
TB_KUBE_EGRESS=AGENT-SESSIONS-EGRESS        # counts, logs and rejects what the cluster sent elsewhere
TB_KUBE_CGROUP=agent-sessions-kube          # cgroup v2 (unified) group holding every cluster daemon
TB_KUBE_DAEMONS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
TB_KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
# Kernel settings the kubelet or kube-proxy may change; saved before up, restored on down.
TB_KUBE_SYSCTLS=(net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

tb_kube_src_dir() { compgen -G "$TB_SRC/kubernetes-1.20.*" | head -1; }

# --- build ---------------------------------------------------------------------------------------

tb_kube_apt_config() {
  local a=$TB_KUBE_DIR/apt uri codename
  mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$a/parts"
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  # The same mirror the machine already uses for its main archive.
  uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' |
    awk -v c="$codename" '$2==c && $3=="main"{print $1; exit}')
  [[ -n $uri ]] || { tb_say "no apt source for $codename main found"; return 1; }
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $codename main" >"$a/sources.list"
  cat >"$a/apt.conf" <<CONF
Dir::Etc::sourcelist "$a/sources.list";
Dir::Etc::sourceparts "$a/parts";
Dir::State::lists "$a/lists";
Dir::Cache "$a/cache";
CONF
  APT_CONFIG=$a/apt.conf apt-get update -q >"$TB_LOG/kube-apt.log" 2>&1 || { tail -20 "$TB_LOG/kube-apt.log" >&2; return 1; }
}

tb_kube_fetch_source() {
  [[ -n $(tb_kube_src_dir) && -d $(tb_kube_src_dir)/vendor ]] && return 0
  tb_kube_apt_config
  (cd "$TB_SRC" && APT_CONFIG=$TB_KUBE_DIR/apt/apt.conf apt-get source -q kubernetes >>"$TB_LOG/kube-apt.log" 2>&1) ||
    { tail -20 "$TB_LOG/kube-apt.log" >&2; return 1; }
  [[ -d $(tb_kube_src_dir)/vendor ]]
}

tb_kube_fetch_go() {
  [[ -x $TB_KUBE_GOROOT/bin/go && -d $TB_KUBE_GOROOT/src/runtime ]] && return 0
  local tmp; tmp=$(mktemp -d)
  # Binary packages only downloaded (not installed), then unpacked under TB_HOME.
  (cd "$tmp" && apt-get download -q golang-1.19-go golang-1.19-src >>"$TB_LOG/kube-apt.log" 2>&1) ||
    { tail -20 "$TB_LOG/kube-apt.log" >&2; rm -rf "$tmp"; return 1; }
  rm -rf "$TB_KUBE_DIR/go"
  local d; for d in "$tmp"/*.deb; do dpkg -x "$d" "$TB_KUBE_DIR/go"; done
  rm -rf "$tmp"
  # golang-1.19-go links GOROOT/src (and friends) to /usr/share/go-1.19 with absolute links:
  # point them into our unpacked tree instead.
  local l t
  for l in "$TB_KUBE_GOROOT"/*; do
    [[ -L $l ]] || continue
    t=$(readlink "$l")
    [[ $t == /* ]] && ln -sfn "$TB_KUBE_DIR/go$t" "$l"
  done
  "$TB_KUBE_GOROOT/bin/go" version
}

# tb_kube_go ARGS...: Debian's Go 1.19 in GOPATH mode, static, offline, with its own build cache.
tb_kube_go() {
  env -u GOFLAGS -u GOMODCACHE -u GOTOOLCHAIN GOENV=off GOROOT="$TB_KUBE_GOROOT" GOPATH="$TB_KUBE_GOPATH" \
    GOCACHE="$TB_KUBE_GOCACHE" GO111MODULE=off GOPROXY=off CGO_ENABLED=0 \
    PATH="$TB_KUBE_GOROOT/bin:$PATH" go "$@"
}

tb_kube_gopath() {
  mkdir -p "$TB_KUBE_GOPATH/src/k8s.io"
  ln -sfn "$(tb_kube_src_dir)" "$TB_KUBE_GOPATH/src/k8s.io/kubernetes"
}

# Runs in the tree through the GOPATH symlink (PWD logical), as hack/run-in-gopath.sh does.
tb_kube_in_tree() { (cd "$TB_KUBE_GOPATH/src/k8s.io/kubernetes" && "$@"); }

tb_kube_gen_openapi() {
  local out=pkg/generated/openapi/zz_generated.openapi.go
  [[ -s $TB_KUBE_GOPATH/src/k8s.io/kubernetes/$out ]] && return 0
  tb_kube_in_tree tb_kube_go build -o "$TB_KUBE_DIR/tools/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  # Input packages as Makefile.generated_files computes them for KUBE: every Go dir of the tree
  # (staging/src named as vendor/) with a +k8s:openapi-gen= tag, minus code-generator and
  # sample-apiserver.
  local inputs
  inputs=$(tb_kube_in_tree bash -c '
    find -H . \( -path "./_*" -o -path "./.*" -o -path ./vendor -o -path ./debian \) -prune -o -type f -name "*.go" -print |
      xargs grep -l "^// *+k8s:" | xargs grep -l "+k8s:openapi-gen=" | sed "s|^./staging/src|vendor|; s|^\./||" |
      grep -Ev "^vendor/k8s.io/(code-generator|sample-apiserver)/" | xargs -n1 dirname | LC_ALL=C sort -u |
      sed "s|^|k8s.io/kubernetes/|" | paste -sd, -')
  tb_kube_in_tree env GOPATH="$TB_KUBE_GOPATH" GOROOT="$TB_KUBE_GOROOT" GO111MODULE=off \
    "$TB_KUBE_DIR/tools/openapi-gen" --logtostderr -i "$inputs" \
    -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi -o "$TB_KUBE_GOPATH/src" \
    -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$TB_KUBE_DIR/tools/openapi-violations.report" \
    >"$TB_LOG/kube-openapi-gen.log" 2>&1 || { tail -20 "$TB_LOG/kube-openapi-gen.log" >&2; return 1; }
  [[ -s $TB_KUBE_GOPATH/src/k8s.io/kubernetes/$out ]]
}

tb_kube_ldflags() {
  local v=v1.20.2 date p
  date=$(date -u -d "@$(cd "$(tb_kube_src_dir)" && dpkg-parsechangelog -S Timestamp)" +%Y-%m-%dT%H:%M:%SZ)
  local flags="-s -w"
  for p in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
    flags+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=20 -X $p.gitTreeState=clean -X $p.buildDate=$date"
    flags+=" -X $p.gitCommit=debian-$(basename "$(tb_kube_src_dir)")"
  done
  echo "$flags"
}

tb_kube_build_one() {
  local name=$1
  tb_kube_in_tree tb_kube_go build -ldflags "$(tb_kube_ldflags)" -o "$TB_KUBE_BIN/$name.new" "./cmd/$name" \
    >"$TB_LOG/kube-build-$name.log" 2>&1 || { tail -30 "$TB_LOG/kube-build-$name.log" >&2; return 1; }
  mv -f "$TB_KUBE_BIN/$name.new" "$TB_KUBE_BIN/$name"
}

tb_kube_build_pause() {
  gcc -Os -static -DVERSION=3.2 -o "$TB_KUBE_BIN/pause" "$(tb_kube_src_dir)/build/pause/linux/pause.c"
}

tb_kube_build_stamp() { echo "$(basename "$(tb_kube_src_dir)") $("$TB_KUBE_GOROOT/bin/go" version 2>/dev/null) ${TB_KUBE_BINARIES[*]} pause"; }

tb_kube_packages() {
  # dpkg may be busy with another helper's install: retry for a while.
  local i
  for i in 1 2 3 4 5 6; do
    tb_apt_install etcd-server socat conntrack iptables openssl && return 0
    sleep 10
  done
  return 1
}

tb_kube_build() {
  mkdir -p "$TB_KUBE_BIN" "$TB_KUBE_DIR/tools"
  tb_step "kubernetes: Debian packages (etcd-server socat conntrack iptables)" tb_kube_packages
  local b missing=0
  for b in "${TB_KUBE_BINARIES[@]}" pause; do [[ -x $TB_KUBE_BIN/$b ]] || missing=1; done
  if ((missing == 0)) && [[ -z ${TB_KUBE_REBUILD:-} && -f $TB_STATE/kubernetes-build ]] &&
    [[ $(cat "$TB_STATE/kubernetes-build") == "$(tb_kube_build_stamp)" ]]; then
    ln -sf "$TB_KUBE_BIN/kubectl" "$TB_BIN/kubectl"
    tb_say "kubernetes binaries already built ($(basename "$(tb_kube_src_dir)"); TB_KUBE_REBUILD=1 to rebuild)"
    return 0
  fi
  local t0=$SECONDS
  tb_step "kubernetes: source package (apt-get source kubernetes)" tb_kube_fetch_source
  tb_step "kubernetes: Debian Go 1.19 (dpkg -x)" tb_kube_fetch_go
  tb_kube_gopath
  tb_step "kubernetes: generate pkg/generated/openapi" tb_kube_gen_openapi
  for b in "${TB_KUBE_BINARIES[@]}"; do tb_step "kubernetes: build $b" tb_kube_build_one "$b"; done
  tb_step "kubernetes: build pause" tb_kube_build_pause
  ln -sf "$TB_KUBE_BIN/kubectl" "$TB_BIN/kubectl"
  tb_kube_build_stamp >"$TB_STATE/kubernetes-build"
  tb_say "kubernetes build finished in $((SECONDS - t0))s"
}
