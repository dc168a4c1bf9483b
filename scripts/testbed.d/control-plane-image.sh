# shellcheck shell=bash
# The control-plane image (infra/control-plane): one image for the server and the runner, built
# locally FROM scratch (no registry pulls are possible here) and pushed to the local registry; the
# digest the registry gave it is recorded in $TB_STATE/control-plane-image.json, which is what the
# control-plane program pins (config `agent-sessions-control-plane:image`).
#
# Sourced after common.sh, node.sh and pulumi.sh (it needs their Node 24 and Pulumi binaries).
#
# Layout of the image (infra/control-plane/README.md relies on it):
#   /bin/node, /bin/busybox (+ applets)   Node 24 with the shared libraries it links; a shell
#   /opt/agent-sessions                   the repo's sources (no tests) + production node_modules
#   /opt/pulumi/bin                       pulumi, pulumi-language-nodejs, the helper scripts, and
#                                         pulumi-resource-kubernetes (an ambient plugin on PATH)
#   /opt/pulumi/plugins                   resource-kubernetes-v<version>/ (the runner links it into
#                                         its writable PULUMI_HOME)
#   uid/gid 65532 (agent-sessions) is the default user.
# Three layers, stable first (runtime binaries, node_modules, sources): a source change rebuilds
# and pushes only the small last one.
TB_CP_IMAGE_REPO=$TB_REGISTRY/agent-sessions/control-plane
TB_CP_SOURCES=(bin client contracts infra policies proxy runtimes/catalogue.ts runtimes/kit runtimes/reference runner stacks)

# The repo's runtime sources (working tree, tests excluded), one path a line, sorted.
_tb_cp_source_files() {
  local d dirs=()
  for d in "${TB_CP_SOURCES[@]}"; do [[ -e $TB_REPO/$d ]] && dirs+=("$d"); done
  (cd "$TB_REPO" && find "${dirs[@]}" -type f ! -name '*.test.ts' ! -path '*/node_modules/*' | LC_ALL=C sort
    echo package.json
    echo Pulumi.yaml)
}

# Top-level production packages (npm's own view of the lock, nothing fetched): node_modules/<pkg>.
_tb_cp_prod_packages() {
  (cd "$TB_REPO" && npm ls --omit=dev --parseable --all 2>/dev/null) |
    sed "s|^$TB_REPO/||" | awk -F'node_modules/' 'NF == 2' | LC_ALL=C sort -u
}

tb_control_plane_image_hash() {
  # Rebuild when the sources, the lock, Node, the Pulumi binaries or this recipe change.
  {
    cat "$TB_REPO/scripts/testbed.d/control-plane-image.sh" "$TB_REPO/package-lock.json"
    (cd "$TB_REPO" && _tb_cp_source_files | xargs sha256sum)
    echo "$TB_NODE_VERSION"
    local f
    for f in "$PULUMI_HOME/bin/pulumi" "$PULUMI_HOME/bin/pulumi-language-nodejs" \
      "$PULUMI_HOME/plugins/resource-kubernetes-v$TB_PULUMI_K8S_PLUGIN_VERSION/pulumi-resource-kubernetes"; do
      stat -c '%n %s %Y' "$f"
    done
  } | sha256sum | cut -c1-16
}

_tb_cp_image_cached() {
  local hash=$1
  [[ -f $TB_STATE/control-plane-image.json ]] && grep -q "\"sourceHash\": \"$hash\"" "$TB_STATE/control-plane-image.json" &&
    curl -fsS -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$TB_REGISTRY/v2/agent-sessions/control-plane/manifests/$hash"
}

tb_control_plane_image_up() {
  [[ -x $TB_NODE_DIR/bin/node ]] || tb_node_up
  local k8s=$PULUMI_HOME/plugins/resource-kubernetes-v$TB_PULUMI_K8S_PLUGIN_VERSION
  [[ -x $PULUMI_HOME/bin/pulumi && -x $k8s/pulumi-resource-kubernetes ]] || tb_pulumi_up
  local hash; hash=$(tb_control_plane_image_hash)
  if _tb_cp_image_cached "$hash"; then
    # The registry still holds it; make sure the engine does too (pods run it from our dockerd).
    docker image inspect "$TB_CP_IMAGE_REPO:$hash" >/dev/null 2>&1 || docker pull -q "$TB_CP_IMAGE_REPO:$hash" >/dev/null
    return 0
  fi
  local ctx=$TB_HOME/control-plane-image-build
  rm -rf "$ctx" && mkdir -p "$ctx/runtime/bin" "$ctx/runtime/opt/pulumi/bin" "$ctx/runtime/opt/pulumi/plugins" \
    "$ctx/runtime/etc" "$ctx/runtime/tmp" "$ctx/runtime/var/lib/agent-sessions" "$ctx/modules/opt/agent-sessions" \
    "$ctx/app/opt/agent-sessions"
  # Hard links where the file system allows (same device), copies otherwise: the context is ~800 MB.
  local cpl="cp -al"
  [[ $(stat -c %d "$TB_HOME") == $(stat -c %d "$TB_REPO") ]] || cpl="cp -a"

  # Layer 1: Node 24 and what it links, busybox, the Pulumi CLI, language host, helpers, plugin.
  cp "$TB_NODE_DIR/bin/node" "$ctx/runtime/bin/node"
  local lib
  for lib in $(ldd "$TB_NODE_DIR/bin/node" | grep -oE '/[^ ]+'); do
    mkdir -p "$ctx/runtime$(dirname "$lib")"
    cp -L "$lib" "$ctx/runtime$lib"
  done
  cp /bin/busybox "$ctx/runtime/bin/busybox"
  local a
  for a in sh cat cp ln ls echo mkdir rm sleep env id wget kill ps find test tr; do ln -sf busybox "$ctx/runtime/bin/$a"; done
  cp "$PULUMI_HOME/bin/pulumi" "$PULUMI_HOME/bin/pulumi-language-nodejs" "$ctx/runtime/opt/pulumi/bin/"
  # The helper scripts of pulumi.sh have the test bed's node baked in as a default; the image sets
  # PULUMI_NODEJS_NODE=/bin/node, which they (and the language host) prefer.
  cp "$PULUMI_HOME/bin/pulumi-resource-pulumi-nodejs" "$PULUMI_HOME/bin/pulumi-analyzer-policy" "$ctx/runtime/opt/pulumi/bin/"
  ln -sf pulumi-analyzer-policy "$ctx/runtime/opt/pulumi/bin/pulumi-analyzer-policy-nodejs"
  mkdir -p "$ctx/runtime/opt/pulumi/plugins/$(basename "$k8s")"
  cp "$k8s/pulumi-resource-kubernetes" "$ctx/runtime/opt/pulumi/plugins/$(basename "$k8s")/"
  ln -sf "../plugins/$(basename "$k8s")/pulumi-resource-kubernetes" "$ctx/runtime/opt/pulumi/bin/pulumi-resource-kubernetes"
  # PULUMI_HOME/plugins is 0700 root on the host: the image's user must read and run them.
  chmod -R a+rX "$ctx/runtime/opt/pulumi"
  printf 'root:x:0:0:root:/:/bin/sh\nagent-sessions:x:65532:65532:agent-sessions:/var/lib/agent-sessions:/bin/sh\n' >"$ctx/runtime/etc/passwd"
  printf 'root:x:0:\nagent-sessions:x:65532:\n' >"$ctx/runtime/etc/group"
  chmod 1777 "$ctx/runtime/tmp"

  # Layer 2: production node_modules only (no vitest, biome, rolldown: ~250 MB instead of ~400).
  local pkg
  while IFS= read -r pkg; do
    mkdir -p "$ctx/modules/opt/agent-sessions/$(dirname "$pkg")"
    $cpl "$TB_REPO/$pkg" "$ctx/modules/opt/agent-sessions/$pkg"
  done < <(_tb_cp_prod_packages)

  # Layer 3: the sources.
  (cd "$TB_REPO" && _tb_cp_source_files | while IFS= read -r f; do
    mkdir -p "$ctx/app/opt/agent-sessions/$(dirname "$f")"
    cp -a "$f" "$ctx/app/opt/agent-sessions/$f"
  done)

  cat >"$ctx/Dockerfile" <<'DF'
FROM scratch
COPY runtime/ /
COPY modules/ /
COPY app/ /
ENV PATH=/opt/pulumi/bin:/bin NODE_ENV=production HOME=/tmp PULUMI_NODEJS_NODE=/bin/node \
    PULUMI_SKIP_UPDATE_CHECK=1 PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK=1
USER 65532:65532
WORKDIR /opt/agent-sessions
ENTRYPOINT ["/bin/node", "--max-semi-space-size=16", "/opt/agent-sessions/bin/cli.ts"]
DF
  docker build -q -t "$TB_CP_IMAGE_REPO:$hash" "$ctx" >/dev/null
  docker push -q "$TB_CP_IMAGE_REPO:$hash" >/dev/null
  local digest size
  digest=$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$TB_CP_IMAGE_REPO:$hash" | grep "^$TB_CP_IMAGE_REPO@" | head -1)
  [[ $digest == *@sha256:* ]] || { tb_say "no registry digest for $TB_CP_IMAGE_REPO:$hash"; return 1; }
  size=$(docker image inspect --format '{{.Size}}' "$TB_CP_IMAGE_REPO:$hash")
  rm -rf "$ctx"
  # The previous build's tag goes from the engine (the registry keeps it, pullable by digest): one
  # ~750 MB image a source change would otherwise leave behind each time. In use by a container: kept.
  local prev
  prev=$(grep -o '"tag": "[^"]*"' "$TB_STATE/control-plane-image.json" 2>/dev/null | cut -d'"' -f4 || true)
  [[ -n $prev && $prev != "$hash" ]] && { docker image rm "$TB_CP_IMAGE_REPO:$prev" >/dev/null 2>&1 || true; }
  cat >"$TB_STATE/control-plane-image.json" <<JSON
{
  "repository": "$TB_CP_IMAGE_REPO",
  "tag": "$hash",
  "sourceHash": "$hash",
  "image": "$digest",
  "digest": "${digest#*@}",
  "sizeBytes": $size
}
JSON
  tb_say "control-plane image $digest ($((size / 1024 / 1024)) MiB)"
}

tb_control_plane_image_status() {
  if [[ -f $TB_STATE/control-plane-image.json ]]; then
    echo "control-plane image $(grep '"image"' "$TB_STATE/control-plane-image.json" | cut -d'"' -f4) (recorded in $TB_STATE/control-plane-image.json)"
  else echo "control-plane image not built (tb_control_plane_image_up)"; fi
}
