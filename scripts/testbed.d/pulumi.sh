# shellcheck shell=bash
# Pulumi for the test bed: the CLI, a Node.js language host, the Kubernetes provider and the small
# helper scripts of the release tarball, built with the machine's `go` from the Go module proxy
# (the only source of Pulumi's Go code reachable here). Sourced after common.sh and node.sh.
#
# What the proxy serves decides what is built (see /work/shared/TESTBED.md "Pulumi"):
# - CLI: github.com/pulumi/pulumi/pkg/v3 at $TB_PULUMI_VERSION through a wrapper module (pkg/v3
#   carries replace directives, so `go install pkg@version` refuses).
# - Language host: Pulumi's own (…/sdk/nodejs/cmd/pulumi-language-nodejs/v3) is refused by the
#   proxy (403 for its version list and the release tag), so we build our own small equivalent,
#   scripts/testbed.d/pulumi-language-nodejs/main.go, in the same wrapper module (same sdk/v3).
# - Kubernetes provider: the proxy serves a single provider/v4 version, a pseudo-version of
#   2026-01-15 (no v4.34.2 tag: the repo tags v4.x.y at its root, not provider/v4.x.y). It is
#   installed as plugin version $TB_PULUMI_K8S_PLUGIN_VERSION, the one npm @pulumi/kubernetes
#   asks for, so programs find it without a download.
# - Docker provider: not served at all; see PULUMI-DOCKER-PROVIDER.md beside this file. Not tried.
# - pulumi-resource-pulumi-nodejs (dynamic providers) and pulumi-analyzer-policy (Node policy packs
#   run without a language host) are small shell scripts written here, using the test bed's node.
#
# Everything lands in $PULUMI_HOME/bin (on PATH via common.sh); plugins in $PULUMI_HOME/plugins.
# Stamps in $TB_STATE make a second `up` a few stat calls.

TB_PULUMI_VERSION=${AGENT_SESSIONS_PULUMI_VERSION:-3.276.0}
TB_PULUMI_K8S_MODULE_VERSION=v4.0.0-20260115033456-f47bc2d6f199
TB_PULUMI_K8S_PLUGIN_VERSION=4.34.2
TB_PULUMI_BIN=$PULUMI_HOME/bin
TB_PULUMI_SRC=$TB_SRC/pulumi
TB_PULUMI_K8S_SRC=$TB_SRC/pulumi-kubernetes
TB_PULUMI_HOST_SRC=$TB_REPO/scripts/testbed.d/pulumi-language-nodejs/main.go
# Two cores, and other builds may run beside this one.
TB_PULUMI_GO_P=${AGENT_SESSIONS_GO_PARALLEL:-2}

_tb_pulumi_go() {
  # The proxy also answers for the checksum database; GOFLAGS from the environment stay.
  GOTOOLCHAIN=local GOPROXY=${GOPROXY:-https://proxy.golang.org} go "$@"
}

# _tb_pulumi_copy_replaces MODULE@VERSION DIR: copy MODULE's non-local replace directives into
# DIR/go.mod (local ones, `=> ../sdk`, point into the module's own repository and are dropped:
# the wrapper requires those modules at the release version instead).
_tb_pulumi_copy_replaces() {
  local mod=$1 dir=$2 gomod
  gomod=$(cd "$dir" && _tb_pulumi_go mod download -json "$mod" | jq -r .GoMod)
  [[ -f $gomod ]] || { tb_say "could not download $mod"; return 1; }
  local r
  while IFS= read -r r; do
    [[ -n $r ]] && (cd "$dir" && _tb_pulumi_go mod edit -replace "$r")
  done < <(_tb_pulumi_go mod edit -json "$gomod" | jq -r '.Replace // [] | .[]
      | select(.New.Version != null)
      | "\(.Old.Path)\(if .Old.Version then "@" + .Old.Version else "" end)=\(.New.Path)@\(.New.Version)"')
}

_tb_pulumi_cli_stamp() { echo "$TB_STATE/pulumi-cli-$TB_PULUMI_VERSION"; }
_tb_pulumi_host_stamp() {
  echo "$TB_STATE/pulumi-language-nodejs-$TB_PULUMI_VERSION-$(sha256sum "$TB_PULUMI_HOST_SRC" | cut -c1-12)"
}
_tb_pulumi_k8s_stamp() { echo "$TB_STATE/pulumi-kubernetes-$TB_PULUMI_K8S_PLUGIN_VERSION-$TB_PULUMI_K8S_MODULE_VERSION"; }
_tb_pulumi_scripts_stamp() { echo "$TB_STATE/pulumi-scripts-2-$(readlink -f "$TB_BIN/node" 2>/dev/null | md5sum | cut -c1-8)"; }

_tb_pulumi_wrapper_module() {
  local w=$TB_PULUMI_SRC
  mkdir -p "$w/cmd/pulumi-language-nodejs"
  if [[ ! -f $w/go.mod ]] || ! grep -q "pkg/v3 v$TB_PULUMI_VERSION\$" "$w/go.mod"; then
    rm -f "$w/go.mod" "$w/go.sum"
    cat >"$w/go.mod" <<EOF
module agent-sessions.local/testbed/pulumi

go 1.26

require (
	github.com/pulumi/pulumi/pkg/v3 v$TB_PULUMI_VERSION
	github.com/pulumi/pulumi/sdk/v3 v$TB_PULUMI_VERSION
)
EOF
    _tb_pulumi_copy_replaces "github.com/pulumi/pulumi/pkg/v3@v$TB_PULUMI_VERSION" "$w"
    (cd "$w" && _tb_pulumi_go get "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi@v$TB_PULUMI_VERSION") >"$TB_LOG/pulumi-go-get.log" 2>&1 \
      || { tail -20 "$TB_LOG/pulumi-go-get.log" >&2; return 1; }
  fi
}

_tb_pulumi_build_cli() {
  _tb_pulumi_wrapper_module
  mkdir -p "$TB_PULUMI_BIN"
  (cd "$TB_PULUMI_SRC" && _tb_pulumi_go build -p "$TB_PULUMI_GO_P" -trimpath \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$TB_PULUMI_VERSION" \
    -o "$TB_PULUMI_BIN/pulumi.new" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi) >"$TB_LOG/pulumi-build.log" 2>&1 \
    || { tail -30 "$TB_LOG/pulumi-build.log" >&2; return 1; }
  mv -f "$TB_PULUMI_BIN/pulumi.new" "$TB_PULUMI_BIN/pulumi"
  "$TB_PULUMI_BIN/pulumi" version >/dev/null
  rm -f "$TB_STATE"/pulumi-cli-*
  touch "$(_tb_pulumi_cli_stamp)"
}

_tb_pulumi_build_host() {
  _tb_pulumi_wrapper_module
  cp "$TB_PULUMI_HOST_SRC" "$TB_PULUMI_SRC/cmd/pulumi-language-nodejs/main.go"
  (cd "$TB_PULUMI_SRC" && _tb_pulumi_go build -p "$TB_PULUMI_GO_P" -trimpath \
    -ldflags "-s -w -X main.Version=$TB_PULUMI_VERSION -X main.DefaultNode=$TB_BIN/node" \
    -o "$TB_PULUMI_BIN/pulumi-language-nodejs.new" ./cmd/pulumi-language-nodejs) >"$TB_LOG/pulumi-language-nodejs-build.log" 2>&1 \
    || { tail -30 "$TB_LOG/pulumi-language-nodejs-build.log" >&2; return 1; }
  mv -f "$TB_PULUMI_BIN/pulumi-language-nodejs.new" "$TB_PULUMI_BIN/pulumi-language-nodejs"
  rm -f "$TB_STATE"/pulumi-language-nodejs-*
  touch "$(_tb_pulumi_host_stamp)"
}

_tb_pulumi_build_k8s() {
  local w=$TB_PULUMI_K8S_SRC mod=github.com/pulumi/pulumi-kubernetes/provider/v4
  mkdir -p "$w/bin"
  if [[ ! -f $w/go.mod ]] || ! grep -q "$TB_PULUMI_K8S_MODULE_VERSION" "$w/go.mod"; then
    rm -f "$w/go.mod" "$w/go.sum"
    cat >"$w/go.mod" <<EOF
module agent-sessions.local/testbed/pulumi-kubernetes

go 1.26

require $mod $TB_PULUMI_K8S_MODULE_VERSION
EOF
    _tb_pulumi_copy_replaces "$mod@$TB_PULUMI_K8S_MODULE_VERSION" "$w"
    (cd "$w" && _tb_pulumi_go get "$mod/cmd/pulumi-resource-kubernetes@$TB_PULUMI_K8S_MODULE_VERSION") >"$TB_LOG/pulumi-kubernetes-go-get.log" 2>&1 \
      || { tail -20 "$TB_LOG/pulumi-kubernetes-go-get.log" >&2; return 1; }
  fi
  # cmd/pulumi-resource-kubernetes embeds schema-embed.json and terraform-mapping-embed.json, which
  # upstream's `make` generates (generate.go: schema.json with .version set, both compacted) and
  # the module zip lacks: build a copy of the command with them generated here.
  local src cmd=$w/cmd/pulumi-resource-kubernetes
  src=$(cd "$w" && _tb_pulumi_go list -m -f '{{.Dir}}' "$mod")/cmd/pulumi-resource-kubernetes
  mkdir -p "$cmd"
  cp "$src/main.go" "$cmd/main.go"
  chmod u+w "$cmd/main.go"
  jq -c --arg v "$TB_PULUMI_K8S_PLUGIN_VERSION" '.version = $v' "$src/schema.json" >"$cmd/schema-embed.json"
  jq -c . "$src/terraform-mapping.json" >"$cmd/terraform-mapping-embed.json"
  (cd "$w" && _tb_pulumi_go build -p "$TB_PULUMI_GO_P" -trimpath \
    -ldflags "-s -w -X $mod/pkg/version.Version=$TB_PULUMI_K8S_PLUGIN_VERSION" \
    -o "$w/bin/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes) >"$TB_LOG/pulumi-kubernetes-build.log" 2>&1 \
    || { tail -30 "$TB_LOG/pulumi-kubernetes-build.log" >&2; return 1; }
  "$TB_PULUMI_BIN/pulumi" plugin rm resource kubernetes "$TB_PULUMI_K8S_PLUGIN_VERSION" --yes >/dev/null 2>&1 || true
  "$TB_PULUMI_BIN/pulumi" plugin install resource kubernetes "$TB_PULUMI_K8S_PLUGIN_VERSION" \
    --file "$w/bin/pulumi-resource-kubernetes" >"$TB_LOG/pulumi-kubernetes-install.log" 2>&1 \
    || { cat "$TB_LOG/pulumi-kubernetes-install.log" >&2; return 1; }
  rm -f "$TB_STATE"/pulumi-kubernetes-*
  touch "$(_tb_pulumi_k8s_stamp)"
}

# The release tarball's helper scripts, with the test bed's node baked in ($PULUMI_NODEJS_NODE
# overrides). Both resolve @pulumi/pulumi from their working directory, which the engine sets to
# the program's directory (dynamic providers) or the policy pack's (analyzers).
_tb_pulumi_scripts() {
  mkdir -p "$TB_PULUMI_BIN"
  cat >"$TB_PULUMI_BIN/pulumi-resource-pulumi-nodejs" <<EOF
#!/bin/sh
# Runs Pulumi dynamic providers (pulumi.dynamic.Resource) with the program's own @pulumi/pulumi.
NODE=\${PULUMI_NODEJS_NODE:-$TB_BIN/node}
SCRIPT=\$("\$NODE" -e "console.log(require.resolve('@pulumi/pulumi/cmd/dynamic-provider'))") || exit 1
exec "\$NODE" "\$SCRIPT" "\$@"
EOF
  cat >"$TB_PULUMI_BIN/pulumi-analyzer-policy" <<EOF
#!/bin/sh
# Runs a Node.js policy pack (args: ENGINE-ADDRESS PACK-DIR) with the pack's own @pulumi/pulumi.
# The engine uses it only when no nodejs language host is installed; with one, it asks the host.
NODE=\${PULUMI_NODEJS_NODE:-$TB_BIN/node}
SCRIPT=\$("\$NODE" -e "console.log(require.resolve('@pulumi/pulumi/cmd/run-policy-pack'))") || exit 1
exec "\$NODE" "\$SCRIPT" "\$@"
EOF
  chmod 755 "$TB_PULUMI_BIN/pulumi-resource-pulumi-nodejs" "$TB_PULUMI_BIN/pulumi-analyzer-policy"
  # This CLI looks the fallback analyzer up as "policy-<runtime>".
  ln -sf pulumi-analyzer-policy "$TB_PULUMI_BIN/pulumi-analyzer-policy-nodejs"
  rm -f "$TB_STATE"/pulumi-scripts-*
  touch "$(_tb_pulumi_scripts_stamp)"
}

tb_pulumi_up() {
  command -v go >/dev/null || { tb_say "pulumi needs the machine's go (not found)"; return 1; }
  command -v jq >/dev/null || tb_apt_install jq
  [[ -x $TB_BIN/node ]] || tb_node_up
  mkdir -p "$TB_PULUMI_BIN" "$TB_PULUMI_SRC"
  if [[ ! -f $(_tb_pulumi_cli_stamp) || ! -x $TB_PULUMI_BIN/pulumi ]]; then
    tb_step "pulumi CLI v$TB_PULUMI_VERSION (go build)" _tb_pulumi_build_cli
  fi
  if [[ ! -f $(_tb_pulumi_host_stamp) || ! -x $TB_PULUMI_BIN/pulumi-language-nodejs ]]; then
    tb_step "pulumi-language-nodejs (go build)" _tb_pulumi_build_host
  fi
  if [[ ! -f $(_tb_pulumi_scripts_stamp) || ! -x $TB_PULUMI_BIN/pulumi-resource-pulumi-nodejs ]]; then
    tb_step "pulumi helper scripts" _tb_pulumi_scripts
  fi
  # pulumi-resource-docker: not served by the module proxy; see PULUMI-DOCKER-PROVIDER.md.
  # The Kubernetes provider is its own part (pulumi-kubernetes): Docker stacks never load it.
}

# The Kubernetes provider plugin: only Kubernetes session stacks and the control-plane project
# load it (a Docker stack's `up` runs without it), and its cold build is the longest step here.
tb_pulumi_kubernetes_up() {
  [[ -x $TB_PULUMI_BIN/pulumi ]] || tb_pulumi_up
  if [[ ! -f $(_tb_pulumi_k8s_stamp) ]] || ! compgen -G "$PULUMI_HOME/plugins/resource-kubernetes-v$TB_PULUMI_K8S_PLUGIN_VERSION/pulumi-resource-kubernetes" >/dev/null; then
    tb_step "pulumi-resource-kubernetes $TB_PULUMI_K8S_PLUGIN_VERSION (go build, plugin install)" _tb_pulumi_build_k8s
  fi
}

tb_pulumi_status() {
  local hint="not installed (scripts/testbed up pulumi)"
  if [[ -x $TB_PULUMI_BIN/pulumi ]]; then
    echo "pulumi                 $("$TB_PULUMI_BIN/pulumi" version 2>/dev/null) at $TB_PULUMI_BIN/pulumi"
  else
    echo "pulumi                 $hint"
  fi
  if [[ -x $TB_PULUMI_BIN/pulumi-language-nodejs ]]; then
    echo "pulumi-language-nodejs $TB_PULUMI_VERSION (test bed's own host) at $TB_PULUMI_BIN/pulumi-language-nodejs"
  else
    echo "pulumi-language-nodejs $hint"
  fi
  local k8s=$PULUMI_HOME/plugins/resource-kubernetes-v$TB_PULUMI_K8S_PLUGIN_VERSION/pulumi-resource-kubernetes
  if [[ -x $k8s ]]; then
    echo "pulumi kubernetes      $TB_PULUMI_K8S_PLUGIN_VERSION (from provider/v4 $TB_PULUMI_K8S_MODULE_VERSION) at $k8s"
  else
    echo "pulumi kubernetes      $hint"
  fi
  if [[ -x $TB_PULUMI_BIN/pulumi-resource-pulumi-nodejs && -x $TB_PULUMI_BIN/pulumi-analyzer-policy ]]; then
    echo "pulumi helper scripts  pulumi-resource-pulumi-nodejs, pulumi-analyzer-policy in $TB_PULUMI_BIN"
  else
    echo "pulumi helper scripts  $hint"
  fi
  echo "pulumi docker          not available (module not served; see scripts/testbed.d/PULUMI-DOCKER-PROVIDER.md)"
}
