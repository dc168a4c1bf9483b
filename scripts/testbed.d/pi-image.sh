# shellcheck shell=bash
# The `pi` runtime image: FROM the session base image (base-image.sh, pinned by its registry
# digest) + Node 24 + the Pi coding agent from npm + the project's v1alpha2 adapter around
# `pi --mode rpc` (runtimes/pi/). Pushed to the local registry; the digest the registry gave it is
# recorded in $TB_STATE/pi-image.json, which `serve` registers as AgentRuntime `default/pi`.
#
# Sourced after common.sh, node.sh and base-image.sh.
#
# Layout (runtimes/pi/pi-agent.ts relies on it):
#   /usr/local/bin/node                      Node 24 (the base image has glibc and libstdc++)
#   /opt/pi/node_modules                     @earendil-works/pi-coding-agent and its dependencies
#   /usr/local/bin/pi                        pi's CLI
#   /app/{runtimes/pi,runtimes/kit,contracts}   the adapter, the runtime kit, the contracts
# Three layers, stable first (Node, pi, sources): an adapter change rebuilds only the small last one.
TB_PI_IMAGE_REPO=$TB_REGISTRY/agent-sessions/pi
TB_PI_VERSION=1.6.0
TB_PI_DIR=$TB_HOME/pi-coding-agent-$TB_PI_VERSION

tb_pi_install() {
  [[ -f $TB_PI_DIR/.installed ]] && return 0
  rm -rf "$TB_PI_DIR" && mkdir -p "$TB_PI_DIR"
  printf '{"private":true,"dependencies":{"@earendil-works/pi-coding-agent":"%s"}}\n' "$TB_PI_VERSION" >"$TB_PI_DIR/package.json"
  # npm 11 runs no dependency install scripts unless allowed: nothing from the packages runs here.
  (cd "$TB_PI_DIR" && npm install --omit=dev --no-audit --no-fund --loglevel=error >"$TB_LOG/pi-install.log" 2>&1) \
    || { tail -20 "$TB_LOG/pi-install.log" >&2; return 1; }
  touch "$TB_PI_DIR/.installed"
}

tb_pi_image_hash() { tb_runtime_image_hash pi "$TB_NODE_VERSION" "$TB_PI_VERSION"; }

tb_pi_image_up() {
  [[ -x $TB_NODE_DIR/bin/node ]] || tb_node_up
  tb_base_image_up
  local hash; hash=$(tb_pi_image_hash)
  tb_image_cached "$TB_PI_IMAGE_REPO" pi-image "$hash" && return 0
  tb_pi_install
  local base; base=$(grep '"image"' "$TB_STATE/base-image.json" | cut -d'"' -f4)
  local ctx=$TB_HOME/pi-image-build
  rm -rf "$ctx" && mkdir -p "$ctx/node" "$ctx/pi"
  cp "$TB_NODE_DIR/bin/node" "$ctx/node/node"
  ln -s /opt/pi/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js "$ctx/node/pi"
  cp -a "$TB_PI_DIR/node_modules" "$ctx/pi/node_modules"
  # Source maps and type declarations are not run: ~70 MB less.
  find "$ctx/pi/node_modules" -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' \) -delete
  tb_runtime_app pi "$ctx/app"
  cat >"$ctx/Dockerfile" <<DF
FROM $base
COPY node/ /usr/local/bin/
COPY pi/ /opt/pi/
COPY app/ /app/
ENV NODE_ENV=production PI_OFFLINE=1 PI_SKIP_VERSION_CHECK=1 PI_TELEMETRY=0
WORKDIR /workspace
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/node", "/app/runtimes/pi/adapter-main.ts"]
DF
  tb_build_and_push_image "$TB_PI_IMAGE_REPO" pi-image "$hash" "$ctx" "piVersion=$TB_PI_VERSION"
}

tb_pi_image_status() { tb_image_status_line pi pi-image pi-image; }
