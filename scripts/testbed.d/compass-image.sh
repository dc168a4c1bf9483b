# shellcheck shell=bash
# The `compass` runtime image: FROM the session base image (base-image.sh, pinned by its registry
# digest) + Bun + the Oh My Pi SDK from npm + our agent (runtimes/compass/) behind the shared
# v1alpha2 adapter server. Pushed to the local registry; the digest the registry gave it is
# recorded in $TB_STATE/compass-image.json, which `serve` registers as AgentRuntime
# `default/compass`.
#
# Sourced after common.sh, node.sh and base-image.sh.
#
# Layout (runtimes/catalogue.ts and runtimes/compass/ rely on it):
#   /usr/local/bin/bun                         Bun (the SDK ships .ts sources only Bun runs; glibc from the base)
#   /app/node_modules/@oh-my-pi, @opentelemetry  the SDK, every @oh-my-pi package pinned to one version
#   /app/{runtimes/compass,runtimes/kit,contracts}, /app/node_modules/zod
# Three layers, stable first (Bun, SDK, sources): an agent change rebuilds only the small last one.
# pi-natives ships two builds of one 180 MB library (baseline and modern CPUs); only the baseline
# one is kept (PI_NATIVE_VARIANT=baseline), the other would double the image for no function.
TB_COMPASS_IMAGE_REPO=$TB_REGISTRY/agent-sessions/compass
# The registry's `latest` @oh-my-pi packages are out of step (18.2.11 wants a pi-natives that is
# not served): every @oh-my-pi package is pinned here, dependencies included (overrides).
TB_COMPASS_SDK_VERSION=18.2.3
TB_COMPASS_BUN_VERSION=1.4.5
TB_COMPASS_DIR=$TB_HOME/compass-sdk-$TB_COMPASS_SDK_VERSION-bun-$TB_COMPASS_BUN_VERSION

tb_compass_install() {
  [[ -f $TB_COMPASS_DIR/.installed ]] && return 0
  rm -rf "$TB_COMPASS_DIR" && mkdir -p "$TB_COMPASS_DIR"
  local v=$TB_COMPASS_SDK_VERSION
  cat >"$TB_COMPASS_DIR/package.json" <<JSON
{"private":true,
 "dependencies":{"@oh-my-pi/pi-agent-core":"$v","@oh-my-pi/pi-ai":"$v","@oh-my-pi/pi-catalog":"$v","@oh-my-pi/omptype":"$v","@oven/bun-linux-x64":"$TB_COMPASS_BUN_VERSION"},
 "overrides":{"@oh-my-pi/pi-natives":"$v","@oh-my-pi/pi-utils":"$v","@oh-my-pi/pi-wire":"$v","@oh-my-pi/snapcompact":"$v"}}
JSON
  # npm 11 runs no dependency install scripts unless allowed: nothing from the packages runs here.
  (cd "$TB_COMPASS_DIR" && npm install --omit=dev --no-audit --no-fund --loglevel=error >"$TB_LOG/compass-install.log" 2>&1) \
    || { tail -20 "$TB_LOG/compass-install.log" >&2; return 1; }
  local bad; bad=$(cd "$TB_COMPASS_DIR/node_modules/@oh-my-pi" && grep -L "\"version\": \"$v\"" ./*/package.json || true)
  [[ -z $bad ]] || { tb_say "compass: @oh-my-pi packages not at $v: $bad"; return 1; }
  touch "$TB_COMPASS_DIR/.installed"
}

tb_compass_image_hash() { tb_runtime_image_hash compass "$TB_COMPASS_SDK_VERSION" "$TB_COMPASS_BUN_VERSION"; }

tb_compass_image_up() {
  [[ -x $TB_NODE_DIR/bin/node ]] || tb_node_up
  tb_base_image_up
  local hash; hash=$(tb_compass_image_hash)
  tb_image_cached "$TB_COMPASS_IMAGE_REPO" compass-image "$hash" && return 0
  tb_compass_install
  local base; base=$(grep '"image"' "$TB_STATE/base-image.json" | cut -d'"' -f4)
  local ctx=$TB_HOME/compass-image-build
  rm -rf "$ctx" && mkdir -p "$ctx/bun" "$ctx/sdk"
  cp "$TB_COMPASS_DIR/node_modules/@oven/bun-linux-x64/bin/bun" "$ctx/bun/bun"
  cp -a "$TB_COMPASS_DIR/node_modules" "$ctx/sdk/node_modules"
  rm -rf "$ctx/sdk/node_modules/@oven" "$ctx/sdk/node_modules/.package-lock.json"
  rm -f "$ctx"/sdk/node_modules/@oh-my-pi/pi-natives-linux-x64/pi_natives.linux-x64-modern.node
  # Type declarations, source maps and third-party notices beside the code are not run.
  find "$ctx/sdk/node_modules" -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' \) -delete
  tb_runtime_app compass "$ctx/app"
  cat >"$ctx/Dockerfile" <<DF
FROM $base
COPY bun/ /usr/local/bin/
COPY sdk/ /app/
COPY app/ /app/
ENV PI_NATIVE_VARIANT=baseline BUN_RUNTIME_TRANSPILER_CACHE_PATH=0 DO_NOT_TRACK=1
WORKDIR /workspace
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/bun", "/app/runtimes/compass/adapter-main.ts"]
DF
  tb_build_and_push_image "$TB_COMPASS_IMAGE_REPO" compass-image "$hash" "$ctx" \
    "sdkVersion=$TB_COMPASS_SDK_VERSION" "bunVersion=$TB_COMPASS_BUN_VERSION"
}

tb_compass_image_status() { tb_image_status_line compass compass-image compass-image; }
