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
#   *.kubeconfig, etcd/ (data), kubelet/ (root dir), dockershim/, images/ (build contexts)
# $TB_HOME/gocache-go1.19 is this Go's build cache, separate from common.sh's GOCACHE.
# Dynamic PVs land in /tmp/hostpath_pv/<uuid> (fixed in the provisioner's source).

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
TB_KUBE_DAEMONS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kube-api-relay)
TB_KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
# Kernel settings the kubelet or kube-proxy may change; saved before up, restored on down.
TB_KUBE_SYSCTLS=(net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

tb_kube_src_dir() { compgen -G "$TB_SRC/kubernetes-1.20.*" | head -1; }
# Our cgroup v2 group: in the unified hierarchy of a hybrid host (here), or in /sys/fs/cgroup on a pure v2 host.
tb_kube_cgdir() { if [[ -d /sys/fs/cgroup/unified ]]; then echo "/sys/fs/cgroup/unified/$TB_KUBE_CGROUP"; else echo "/sys/fs/cgroup/$TB_KUBE_CGROUP"; fi; }

# --- build ---------------------------------------------------------------------------------------

tb_kube_apt_config() {
  local a=$TB_KUBE_DIR/apt uri codename
  mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$a/parts"
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  # The same mirror the machine already uses for its main archive.
  # shellcheck disable=SC2016
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

# The one source change: the 1.20 hostPath provisioner creates PV directories 0750 root, so a
# non-root pod cannot write to its own PVC. Make them 0777, as common local provisioners do
# (the parent /tmp/hostpath_pv stays 0750 root, so other host users cannot reach them).
tb_kube_patch_source() {
  local f; f=$(tb_kube_src_dir)/pkg/volume/hostpath/host_path.go
  grep -q 'agent-sessions testbed' "$f" && return 0
  grep -q 'return pv, os.MkdirAll(pv.Spec.HostPath.Path, 0750)' "$f" || { tb_say "unexpected $f"; return 1; }
  sed -i 's|^\treturn pv, os.MkdirAll(pv.Spec.HostPath.Path, 0750)$|\tif err := os.MkdirAll(pv.Spec.HostPath.Path, 0750); err != nil {\n\t\treturn pv, err\n\t}\n\t// agent-sessions testbed: writable by the pod whatever its user.\n\treturn pv, os.Chmod(pv.Spec.HostPath.Path, 0777)|' "$f"
  grep -q 'agent-sessions testbed' "$f"
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

tb_kube_build_stamp() { echo "$(basename "$(tb_kube_src_dir)") $("$TB_KUBE_GOROOT/bin/go" version 2>/dev/null) ${TB_KUBE_BINARIES[*]} pause hostpath-0777"; }

tb_kube_packages() {
  # dpkg may be busy with another helper's install: retry for a while.
  local _
  for _ in 1 2 3 4 5 6; do
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
  tb_kube_patch_source
  tb_step "kubernetes: generate pkg/generated/openapi" tb_kube_gen_openapi
  for b in "${TB_KUBE_BINARIES[@]}"; do tb_step "kubernetes: build $b" tb_kube_build_one "$b"; done
  tb_step "kubernetes: build pause" tb_kube_build_pause
  ln -sf "$TB_KUBE_BIN/kubectl" "$TB_BIN/kubectl"
  tb_kube_build_stamp >"$TB_STATE/kubernetes-build"
  tb_say "kubernetes build finished in $((SECONDS - t0))s"
}

# --- certificates and kubeconfigs -----------------------------------------------------------------

# tb_kube_cert NAME SUBJECT [SANS]: EC P-256 key + certificate signed by our CA (10 years).
tb_kube_cert() {
  local name=$1 subj=$2 sans=${3:-} p=$TB_KUBE_PKI
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/$name.key" 2>/dev/null
  openssl req -new -key "$p/$name.key" -subj "$subj" -out "$p/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n $sans ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$sans"
    else echo "extendedKeyUsage=clientAuth"; fi
  } >"$p/$name.ext"
  openssl x509 -req -in "$p/$name.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 3650 \
    -extfile "$p/$name.ext" -out "$p/$name.crt" 2>/dev/null
  rm -f "$p/$name.csr" "$p/$name.ext"
}

# tb_kube_kubeconfig FILE CERTNAME: a kubeconfig with embedded CA, client certificate and key.
tb_kube_kubeconfig() {
  local f=$1 c=$2 p=$TB_KUBE_PKI
  cat >"$f.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $TB_KUBE_API
    certificate-authority-data: $(base64 -w0 "$p/ca.crt")
users:
- name: $c
  user:
    client-certificate-data: $(base64 -w0 "$p/$c.crt")
    client-key-data: $(base64 -w0 "$p/$c.key")
contexts:
- name: testbed
  context:
    cluster: testbed
    user: $c
    namespace: default
current-context: testbed
KC
  chmod 600 "$f.tmp"
  mv -f "$f.tmp" "$f"
}

tb_kube_bridge() { echo "${TB_BRIDGE:-asbr0}"; }
tb_kube_bridge_ip() { { ip -4 -o addr show dev "$(tb_kube_bridge)" 2>/dev/null || true; } | awk '{print $4; exit}' | cut -d/ -f1; }

tb_kube_pki() {
  local p=$TB_KUBE_PKI bip; bip=$(tb_kube_bridge_ip)
  # Regenerated only when missing or made for another bridge address.
  if [[ -f $p/complete && $(cat "$p/complete") == "$bip" ]]; then return 0; fi
  rm -rf "$p"; mkdir -p "$p"; chmod 700 "$p"
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$p/ca.key" -subj "/CN=agent-sessions-testbed-ca" -days 3650 -out "$p/ca.crt" 2>/dev/null
  local svc_ip; svc_ip=$(echo "$TB_KUBE_SERVICE_CIDR" | awk -F'[./]' '{print $1"."$2"."$3"."$4+1}')
  tb_kube_cert apiserver "/CN=kube-apiserver" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$svc_ip${bip:+,IP:$bip}"
  tb_kube_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  tb_kube_cert admin "/O=system:masters/CN=agent-sessions-admin"
  tb_kube_cert controller-manager "/CN=system:kube-controller-manager"
  tb_kube_cert scheduler "/CN=system:kube-scheduler"
  tb_kube_cert kube-proxy "/CN=system:kube-proxy"
  tb_kube_cert kubelet-client "/O=system:nodes/CN=system:node:$TB_KUBE_NODE"
  tb_kube_cert kubelet-serving "/CN=$TB_KUBE_NODE" "DNS:$TB_KUBE_NODE,DNS:localhost,IP:127.0.0.1"
  openssl ecparam -name prime256v1 -genkey -noout -out "$p/sa.key" 2>/dev/null
  openssl ec -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  tb_kube_kubeconfig "$TB_KUBE_DIR/admin.kubeconfig" admin
  tb_kube_kubeconfig "$TB_KUBE_DIR/controller-manager.kubeconfig" controller-manager
  tb_kube_kubeconfig "$TB_KUBE_DIR/scheduler.kubeconfig" scheduler
  tb_kube_kubeconfig "$TB_KUBE_DIR/kube-proxy.kubeconfig" kube-proxy
  tb_kube_kubeconfig "$TB_KUBE_DIR/kubelet.kubeconfig" kubelet-client
  # The apiserver reaches the kubelet by the node's Hostname address ($TB_KUBE_NODE); in its own
  # mount namespace this file is its /etc/hosts, so that name is 127.0.0.1 without any DNS query.
  printf '127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$TB_KUBE_NODE" >"$TB_KUBE_DIR/apiserver-hosts"
  echo "$bip" >"$p/complete"
}

# --- the pause image ------------------------------------------------------------------------------

tb_kube_pause_image() {
  docker image inspect k8s.gcr.io/pause:3.2 >/dev/null 2>&1 && return 0
  local ctx=$TB_KUBE_DIR/images/pause
  mkdir -p "$ctx"
  cp -f "$TB_KUBE_BIN/pause" "$ctx/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
  docker build -q -t k8s.gcr.io/pause:3.2 "$ctx" >/dev/null
}

# --- egress guard ---------------------------------------------------------------------------------
#
# How the test bed proves the cluster talks only to loopback and its own bridge:
#  * Every cluster daemon (etcd, apiserver, controller-manager, scheduler, kubelet, kube-proxy) is
#    started inside one cgroup v2 group, /sys/fs/cgroup/unified/$TB_KUBE_CGROUP (the unified
#    hierarchy of this cgroup-v1 hybrid host; no controller is enabled there, it only labels the
#    processes). Everything they spawn (iptables, mount, nsenter, socat for port-forward, ...) is
#    in it too. Pod containers are started by dockerd and are not.
#  * Our chain $TB_KUBE_GUARD is jumped to first from OUTPUT (iptables and ip6tables): packets
#    leaving through `lo` return at once; packets whose socket belongs to that cgroup
#    (`-m cgroup --path`) and that leave through any interface but our bridge go to
#    $TB_KUBE_EGRESS, which counts them, LOGs them (prefix "agent-sessions-egress:") and REJECTs
#    them. Then any process's packet to 169.254.0.0/16 (cloud metadata) is rejected.
#  * From FORWARD, $TB_KUBE_GUARD-FWD counts in $TB_KUBE_EGRESS-PODS (LOG, no reject) what
#    anything on our bridge (pods, and any other container of our dockerd) sends to another
#    interface, and rejects what it sends to 169.254.0.0/16.
#  The packet counters ("tb_kube_egress", or `iptables -w -nvxL $TB_KUBE_EGRESS`) count since the
#  cluster came up; zero means no such packet was even attempted.

tb_kube_ipt() { local t=$1; shift; "$t" -w 10 "$@"; }

tb_kube_guard_up() {
  local cg br; cg=$(tb_kube_cgdir) br=$(tb_kube_bridge)
  mkdir -p "$cg"
  local t
  for t in iptables ip6tables; do
    if tb_kube_ipt "$t" -C OUTPUT -j "$TB_KUBE_GUARD" 2>/dev/null; then continue; fi
    tb_kube_ipt "$t" -N "$TB_KUBE_EGRESS" 2>/dev/null || tb_kube_ipt "$t" -F "$TB_KUBE_EGRESS"
    tb_kube_ipt "$t" -A "$TB_KUBE_EGRESS" -j LOG --log-prefix "agent-sessions-egress: " --log-uid
    tb_kube_ipt "$t" -A "$TB_KUBE_EGRESS" -j REJECT
    tb_kube_ipt "$t" -N "$TB_KUBE_GUARD" 2>/dev/null || tb_kube_ipt "$t" -F "$TB_KUBE_GUARD"
    tb_kube_ipt "$t" -A "$TB_KUBE_GUARD" -o lo -j RETURN
    tb_kube_ipt "$t" -A "$TB_KUBE_GUARD" ! -o "$br" -m cgroup --path "$TB_KUBE_CGROUP" -j "$TB_KUBE_EGRESS"
    [[ $t == iptables ]] && tb_kube_ipt "$t" -A "$TB_KUBE_GUARD" -d 169.254.0.0/16 -j REJECT
    tb_kube_ipt "$t" -I OUTPUT 1 -j "$TB_KUBE_GUARD"
  done
  if ! tb_kube_ipt iptables -C FORWARD -j "$TB_KUBE_GUARD-FWD" 2>/dev/null; then
    tb_kube_ipt iptables -N "$TB_KUBE_EGRESS-PODS" 2>/dev/null || tb_kube_ipt iptables -F "$TB_KUBE_EGRESS-PODS"
    tb_kube_ipt iptables -A "$TB_KUBE_EGRESS-PODS" -j LOG --log-prefix "agent-sessions-pod-egress: "
    tb_kube_ipt iptables -N "$TB_KUBE_GUARD-FWD" 2>/dev/null || tb_kube_ipt iptables -F "$TB_KUBE_GUARD-FWD"
    tb_kube_ipt iptables -A "$TB_KUBE_GUARD-FWD" -i "$br" -d 169.254.0.0/16 -j REJECT
    tb_kube_ipt iptables -A "$TB_KUBE_GUARD-FWD" -i "$br" ! -o "$br" -j "$TB_KUBE_EGRESS-PODS"
    tb_kube_ipt iptables -I FORWARD 1 -j "$TB_KUBE_GUARD-FWD"
  fi
}

tb_kube_guard_down() {
  local t c
  for t in iptables ip6tables; do
    while tb_kube_ipt "$t" -D OUTPUT -j "$TB_KUBE_GUARD" 2>/dev/null; do :; done
    while tb_kube_ipt "$t" -D FORWARD -j "$TB_KUBE_GUARD-FWD" 2>/dev/null; do :; done
    for c in "$TB_KUBE_GUARD" "$TB_KUBE_GUARD-FWD" "$TB_KUBE_EGRESS" "$TB_KUBE_EGRESS-PODS"; do
      tb_kube_ipt "$t" -F "$c" 2>/dev/null || true
    done
    for c in "$TB_KUBE_GUARD" "$TB_KUBE_GUARD-FWD" "$TB_KUBE_EGRESS" "$TB_KUBE_EGRESS-PODS"; do
      tb_kube_ipt "$t" -X "$c" 2>/dev/null || true
    done
  done
}

# Packets of the first rule (LOG) of a chain, 0 when the chain is absent.
tb_kube_chain_packets() { { tb_kube_ipt "$1" -nvxL "$2" 2>/dev/null || true; } | awk 'NR==3{print $1; f=1} END{if(!f) print 0}'; }

# tb_kube_egress: what the cluster sent outside loopback and our bridge since it came up.
tb_kube_egress() {
  local v4 v6 pods
  v4=$(tb_kube_chain_packets iptables "$TB_KUBE_EGRESS")
  v6=$(tb_kube_chain_packets ip6tables "$TB_KUBE_EGRESS")
  pods=$(tb_kube_chain_packets iptables "$TB_KUBE_EGRESS-PODS")
  echo "cluster_egress_packets_ipv4=$v4"
  echo "cluster_egress_packets_ipv6=$v6"
  echo "bridge_forwarded_packets=$pods"
}

# --- daemons --------------------------------------------------------------------------------------

# tb_kube_spawn NAME CMD...: start a daemon in our cgroup, detached, with a clean environment
# (no proxy variables, no AWS metadata lookups), pid in $TB_RUN/NAME.pid, log in $TB_LOG/NAME.log.
# fd 9 is scripts/testbed's flock: a daemon keeping it open would block every later call.
tb_kube_spawn() {
  local name=$1; shift
  tb_pid_alive "$name" && return 0
  rm -f "$TB_RUN/$name.pid"
  # shellcheck disable=SC2016
  setsid env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$TB_KUBE_DIR" LANG=C.UTF-8 \
    AWS_EC2_METADATA_DISABLED=true \
    sh -c 'echo $$ >"$0/cgroup.procs" && echo $$ >"$1" && shift && exec "$@"' \
    "$(tb_kube_cgdir)" "$TB_RUN/$name.pid" "$@" \
    >>"$TB_LOG/$name.log" 2>&1 </dev/null 9>&- &
  tb_wait_for "$name pid file" 10 test -s "$TB_RUN/$name.pid"
}

tb_kube_fail() { tb_say "$1 failed; last lines of $TB_LOG/$2.log:"; tail -25 "$TB_LOG/$2.log" >&2; return 1; }

tb_kube_kubectl() { "$TB_KUBE_BIN/kubectl" --kubeconfig "$TB_KUBE_DIR/admin.kubeconfig" --cache-dir "$TB_KUBE_DIR/kubectl-cache" "$@"; }

tb_kube_node_ready() {
  [[ $(tb_kube_kubectl get node "$TB_KUBE_NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

tb_kube_all_alive() {
  local d
  for d in "${TB_KUBE_DAEMONS[@]}"; do tb_pid_alive "$d" || return 1; done
}

tb_kube_save_sysctls() {
  [[ -f $TB_STATE/kubernetes-sysctls ]] && return 0
  local k f
  for k in "${TB_KUBE_SYSCTLS[@]}"; do
    f=/proc/sys/${k//.//}
    if [[ -r $f ]]; then echo "$k=$(cat "$f")"; fi
  done >"$TB_STATE/kubernetes-sysctls.tmp"
  # Directories the 1.20 kubelet and the hostPath provisioner create at fixed places (pod logs,
  # device-plugin socket, PVs): removed on down if they were not there before up.
  local d
  for d in /var/log/pods /var/log/containers /var/lib/kubelet "$TB_KUBE_PV_DIR"; do [[ -e $d ]] || echo "created=$d"; done >>"$TB_STATE/kubernetes-sysctls.tmp"
  mv "$TB_STATE/kubernetes-sysctls.tmp" "$TB_STATE/kubernetes-sysctls"
}

tb_kube_start_etcd() {
  mkdir -p "$TB_KUBE_DIR/etcd"; chmod 700 "$TB_KUBE_DIR/etcd"
  tb_kube_spawn etcd /usr/bin/etcd --name "$TB_KUBE_NODE" --data-dir "$TB_KUBE_DIR/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$TB_KUBE_NODE=http://127.0.0.1:2380" --initial-cluster-state new
  tb_wait_for etcd 30 curl -fsS http://127.0.0.1:2379/health || tb_kube_fail etcd etcd
}

tb_kube_start_apiserver() {
  local p=$TB_KUBE_PKI bip; bip=$(tb_kube_bridge_ip)
  # shellcheck disable=SC2016
  tb_kube_spawn kube-apiserver unshare -m --propagation private \
    sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$TB_KUBE_DIR/apiserver-hosts" \
    "$TB_KUBE_BIN/kube-apiserver" \
    --bind-address=127.0.0.1 --secure-port="$TB_KUBE_API_PORT" --insecure-port=0 \
    --advertise-address="${bip:-127.0.0.1}" --endpoint-reconciler-type=none \
    --etcd-servers=http://127.0.0.1:2379 \
    --client-ca-file="$p/ca.crt" --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" --kubelet-preferred-address-types=Hostname \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range="$TB_KUBE_SERVICE_CIDR" --allow-privileged=true --profiling=false
  tb_wait_for kube-apiserver 90 tb_kube_kubectl get --raw /readyz || tb_kube_fail kube-apiserver kube-apiserver
}

tb_kube_start_controller_manager() {
  local p=$TB_KUBE_PKI k=$TB_KUBE_DIR/controller-manager.kubeconfig
  mkdir -p "$TB_KUBE_DIR/volume-plugins"   # else it creates /usr/libexec/kubernetes/...
  tb_kube_spawn kube-controller-manager "$TB_KUBE_BIN/kube-controller-manager" \
    --kubeconfig="$k" --authentication-kubeconfig="$k" --authorization-kubeconfig="$k" \
    --bind-address=127.0.0.1 --secure-port=10257 --port=0 --leader-elect=false \
    --client-ca-file="$p/ca.crt" --root-ca-file="$p/ca.crt" \
    --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
    --service-account-private-key-file="$p/sa.key" --use-service-account-credentials=true \
    --service-cluster-ip-range="$TB_KUBE_SERVICE_CIDR" --allocate-node-cidrs=false \
    --enable-hostpath-provisioner=true --flex-volume-plugin-dir="$TB_KUBE_DIR/volume-plugins" --profiling=false
}

tb_kube_start_scheduler() {
  local k=$TB_KUBE_DIR/scheduler.kubeconfig
  tb_kube_spawn kube-scheduler "$TB_KUBE_BIN/kube-scheduler" \
    --kubeconfig="$k" --authentication-kubeconfig="$k" --authorization-kubeconfig="$k" \
    --bind-address=127.0.0.1 --secure-port=10259 --port=0 --leader-elect=false --profiling=false
}

tb_kube_start_kubelet() {
  local p=$TB_KUBE_PKI d=$TB_KUBE_KUBELET_DIR bip driver
  bip=$(tb_kube_bridge_ip)
  driver=$(docker info -f '{{.CgroupDriver}}' 2>/dev/null || echo cgroupfs)
  mkdir -p "$d" "$TB_KUBE_DIR/dockershim"
  tb_kube_spawn kubelet "$TB_KUBE_BIN/kubelet" \
    --kubeconfig="$TB_KUBE_DIR/kubelet.kubeconfig" --hostname-override="$TB_KUBE_NODE" \
    ${bip:+--node-ip="$bip"} --root-dir="$d" --cert-dir="$d/pki" \
    --address=127.0.0.1 --port=10250 --read-only-port=0 --healthz-bind-address=127.0.0.1 --healthz-port=10248 \
    --anonymous-auth=false --client-ca-file="$p/ca.crt" --authorization-mode=Webhook \
    --tls-cert-file="$p/kubelet-serving.crt" --tls-private-key-file="$p/kubelet-serving.key" \
    --container-runtime=docker --docker-endpoint="$DOCKER_HOST" --docker="$DOCKER_HOST" \
    --container-runtime-endpoint="unix://$TB_RUN/dockershim.sock" --image-service-endpoint="unix://$TB_RUN/dockershim.sock" \
    --experimental-dockershim-root-directory="$TB_KUBE_DIR/dockershim" --volume-plugin-dir="$TB_KUBE_DIR/volume-plugins" \
    --pod-infra-container-image=k8s.gcr.io/pause:3.2 --network-plugin= \
    --cgroup-driver="$driver" --cgroups-per-qos=true --fail-swap-on=false --oom-score-adj=0 \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --eviction-hard='memory.available<50Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%' \
    --cluster-domain=cluster.local --resolv-conf=/etc/resolv.conf --serialize-image-pulls=false \
    --rotate-certificates=false --max-pods=110 --node-status-update-frequency=2s
}

tb_kube_start_proxy() {
  tb_kube_spawn kube-proxy "$TB_KUBE_BIN/kube-proxy" \
    --kubeconfig="$TB_KUBE_DIR/kube-proxy.kubeconfig" --hostname-override="$TB_KUBE_NODE" --proxy-mode=iptables \
    --bind-address=127.0.0.1 --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249 \
    --nodeport-addresses=127.0.0.0/8 \
    --conntrack-max-per-core=0 --conntrack-min=0 \
    --conntrack-tcp-timeout-established=0s --conntrack-tcp-timeout-close-wait=0s
}

# In-cluster clients (the control plane's runner pod, infra/control-plane) reach the API server as on
# any cluster: the `kubernetes` Service (10.214.0.1:443) -> its Endpoints <bridge IP>:6443 (kube-proxy)
# -> this relay -> the API server on 127.0.0.1:6443. The API server itself stays on loopback;
# socat only copies bytes, so TLS (the serving certificate already names the bridge IP and the
# Service IP) and authentication stay end to end. Pods on the bridge could not reach the API at all
# before; now they reach it like pods anywhere (session pods carry no token: anonymous gets only
# system:public-info-viewer).
tb_kube_start_api_relay() {
  local bip; bip=$(tb_kube_bridge_ip)
  [[ -n $bip ]] || { tb_say "no address on $(tb_kube_bridge): pods get no API server"; return 0; }
  tb_kube_spawn kube-api-relay socat "TCP-LISTEN:$TB_KUBE_API_PORT,bind=$bip,reuseaddr,fork" "TCP:127.0.0.1:$TB_KUBE_API_PORT"
}

tb_kube_bootstrap_objects() {
  local bip; bip=$(tb_kube_bridge_ip)
  # --endpoint-reconciler-type=none: the API server never writes the `kubernetes` Service's
  # Endpoints; they name the relay above.
  [[ -n $bip ]] && tb_kube_kubectl apply -f - >/dev/null <<EP
apiVersion: v1
kind: Endpoints
metadata:
  name: kubernetes
  namespace: default
subsets:
- addresses:
  - ip: $bip
  ports:
  - name: https
    port: $TB_KUBE_API_PORT
    protocol: TCP
EP
  tb_kube_kubectl apply -f - >/dev/null <<SC
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $TB_KUBE_STORAGECLASS
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
# The Node authorizer learns "pod P on node N uses PVC C" from its own informer; the kubelet
# often asks for the PVC before that ("no relationship found between node ... and this object")
# and then backs off 10 s before mounting. With this RBAC fallback (asked only when the Node
# authorizer has no opinion) a new pod's volume mounts at once. Single node: every pod's
# claims are this node's anyway.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: agent-sessions-testbed:node-volume-reader
rules:
- apiGroups: [""]
  resources: [persistentvolumeclaims, persistentvolumes]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: agent-sessions-testbed:node-volume-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: agent-sessions-testbed:node-volume-reader
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
SC
}

tb_kube_default_sa() { tb_kube_kubectl -n default get serviceaccount default; }

tb_kube_up() {
  tb_kube_build
  if ! docker version >/dev/null 2>&1; then
    if declare -F tb_docker_up >/dev/null; then tb_docker_up
    else tb_say "kubernetes needs our dockerd on $DOCKER_HOST (scripts/testbed up docker)"; return 1; fi
  fi
  if tb_kube_all_alive && tb_kube_node_ready; then
    tb_kube_service_route
    tb_say "kubernetes already up ($TB_KUBE_API, node $TB_KUBE_NODE Ready)"
    return 0
  fi
  local t0; t0=$(tb_now)
  tb_kube_save_sysctls
  tb_step "kubernetes: certificates and kubeconfigs" tb_kube_pki
  tb_step "kubernetes: pause image" tb_kube_pause_image
  tb_kube_guard_up
  tb_step "kubernetes: etcd" tb_kube_start_etcd
  tb_step "kubernetes: kube-apiserver" tb_kube_start_apiserver
  tb_kube_bootstrap_objects
  tb_kube_start_api_relay
  tb_kube_start_controller_manager
  tb_kube_start_scheduler
  tb_kube_start_kubelet
  tb_kube_start_proxy
  tb_kube_service_route
  tb_step "kubernetes: node $TB_KUBE_NODE Ready" tb_wait_for "node Ready" 180 tb_kube_node_ready ||
    { tb_kube_fail "node Ready" kubelet; return 1; }
  tb_wait_for "default service account" 60 tb_kube_default_sa || tb_kube_fail "default service account" kube-controller-manager
  local d
  for d in "${TB_KUBE_DAEMONS[@]}"; do tb_pid_alive "$d" || tb_kube_fail "$d" "$d"; done
  tb_say "kubernetes up in $(awk -v a="$t0" -v b="$(tb_now)" 'BEGIN{printf "%.1fs", b-a}'): $TB_KUBE_API, KUBECONFIG=$KUBECONFIG"
}

# The ClusterIP range is routed to the bridge. Without a route of its own, a connection from the
# node to a ClusterIP that kube-proxy has not programmed yet (a Service just made) follows the
# default route out of the machine, and the sandbox's egress proxy answers it (HTTP 404, kept
# alive: clients that pool connections then keep getting 404 from a Service that routes by now —
# the CI flakes "ClusterIP answer" and the Kubernetes driver's fallback to the pod's address).
# With this route it meets nobody on the bridge and fails, and the next attempt is DNATed. kube-proxy
# rewrites the destination after this first lookup, as before.
tb_kube_service_route() {
  ip route replace "$TB_KUBE_SERVICE_CIDR" dev "$(tb_kube_bridge)" 2>/dev/null ||
    tb_say "could not route $TB_KUBE_SERVICE_CIDR to $(tb_kube_bridge): a ClusterIP not yet programmed goes out the default route"
}

# --- down -----------------------------------------------------------------------------------------

# Removes every KUBE-* chain (kube-proxy's and the kubelet's) from filter, nat and mangle, v4 and v6.
tb_kube_iptables_cleanup() {
  local t tbl c
  for t in iptables ip6tables; do
    for tbl in filter nat mangle; do
      { tb_kube_ipt "$t" -t "$tbl" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -Ev '^-A KUBE-' || true; } |
        sed 's/^-A/-D/' | while read -r r; do eval "tb_kube_ipt $t -t $tbl $r" 2>/dev/null || true; done
      for c in $(tb_kube_ipt "$t" -t "$tbl" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-/{print $2}'); do
        tb_kube_ipt "$t" -t "$tbl" -F "$c" 2>/dev/null || true
      done
      for c in $(tb_kube_ipt "$t" -t "$tbl" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-/{print $2}'); do
        tb_kube_ipt "$t" -t "$tbl" -X "$c" 2>/dev/null || true
      done
    done
  done
}

tb_kube_down() {
  local d cg; cg=$(tb_kube_cgdir)
  # SIGTERM to all at once (each takes ~2 s to exit), then wait; the pod containers go after.
  local pids=()
  for d in kube-api-relay kubelet kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if tb_pid_alive "$d"; then pids+=("$(cat "$TB_RUN/$d.pid")"); kill "$(cat "$TB_RUN/$d.pid")" 2>/dev/null || true; fi
  done
  ((${#pids[@]})) && tb_say "stopping kubernetes daemons (pids ${pids[*]})"
  for d in kube-api-relay kubelet kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd; do tb_stop_pid "$d"; done
  # Anything still in our cgroup was started by our daemons (e.g. a port-forward's socat).
  if [[ -f $cg/cgroup.procs ]]; then
    local pid
    for pid in $(cat "$cg/cgroup.procs"); do kill -9 "$pid" 2>/dev/null || true; done
  fi
  if docker version >/dev/null 2>&1; then
    local ids; ids=$(docker ps -aq --filter 'name=^k8s_' 2>/dev/null || true)
    # shellcheck disable=SC2086
    [[ -n $ids ]] && docker rm -f -v $ids >/dev/null 2>&1 || true
  fi
  [[ -x $TB_KUBE_BIN/kube-proxy ]] && "$TB_KUBE_BIN/kube-proxy" --cleanup >>"$TB_LOG/kube-proxy.log" 2>&1 || true
  tb_kube_iptables_cleanup
  ip route del "$TB_KUBE_SERVICE_CIDR" dev "$(tb_kube_bridge)" 2>/dev/null || true
  tb_kube_guard_down
  # Mounts of pod volumes (tmpfs secrets, hostPath binds) under the kubelet's root dir, deepest first.
  local m
  # (The kubelet also bind-mounts its root dir onto itself to make it rshared.)
  for m in $(awk -v d="$TB_KUBE_KUBELET_DIR" '$2==d || index($2, d "/")==1 {print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  # The kubelet's cgroups (cgroupfs driver): /kubepods in every v1 hierarchy, deepest first.
  local h
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
    [[ -d $h ]] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  [[ -d $cg ]] && rmdir "$cg" 2>/dev/null || true
  # Kernel settings back as they were before up; fixed directories we caused to exist.
  if [[ -f $TB_STATE/kubernetes-sysctls ]]; then
    local line k v
    while IFS= read -r line; do
      k=${line%%=*} v=${line#*=}
      case $k in
        created) rm -rf "$v" ;;
        *) [[ -w /proc/sys/${k//.//} ]] && echo "$v" >"/proc/sys/${k//.//}" 2>/dev/null || true ;;
      esac
    done <"$TB_STATE/kubernetes-sysctls"
    rm -f "$TB_STATE/kubernetes-sysctls"
  fi
  # State: the kubelet's dir, dockershim checkpoints, etcd data (a fresh cluster on each up).
  # PKI, kubeconfigs, binaries and images are kept.
  rm -rf "$TB_KUBE_KUBELET_DIR" "$TB_KUBE_DIR/dockershim" "$TB_KUBE_DIR/etcd" "$TB_KUBE_DIR/volume-plugins"
  rm -f "$TB_RUN/dockershim.sock"
  tb_say "kubernetes down"
}

# --- status ---------------------------------------------------------------------------------------

tb_kube_status() {
  local b
  if [[ -x $TB_KUBE_BIN/kubectl ]]; then
    echo "kubernetes built: $(basename "$(tb_kube_src_dir)") with $("$TB_KUBE_GOROOT/bin/go" version 2>/dev/null | awk '{print $3}'), in $TB_KUBE_BIN"
    for b in "${TB_KUBE_BINARIES[@]}"; do
      if [[ $b == kubectl ]]; then echo "  kubectl                 $("$TB_KUBE_BIN/kubectl" version --client --short 2>/dev/null)"
      elif [[ -x $TB_KUBE_BIN/$b ]]; then printf '  %-23s %s\n' "$b" "$("$TB_KUBE_BIN/$b" --version 2>/dev/null)"
      else printf '  %-23s missing\n' "$b"; fi
    done
    echo "  etcd                    $(/usr/bin/etcd --version 2>/dev/null | head -1)"
  else
    echo "kubernetes not built (scripts/testbed up kubernetes)"
    return 0
  fi
  local d
  for d in "${TB_KUBE_DAEMONS[@]}"; do
    if tb_pid_alive "$d"; then printf '  %-23s running (pid %s), log %s\n' "$d" "$(cat "$TB_RUN/$d.pid")" "$TB_LOG/$d.log"
    else printf '  %-23s not running\n' "$d"; fi
  done
  echo "  API $TB_KUBE_API  KUBECONFIG=$KUBECONFIG  storage class $TB_KUBE_STORAGECLASS (default)"
  if tb_pid_alive kube-apiserver; then
    if tb_kube_node_ready; then echo "  node $TB_KUBE_NODE Ready"; else echo "  node $TB_KUBE_NODE not Ready"; fi
    tb_kube_egress | sed 's/^/  /'
  fi
}
