# shellcheck shell=bash
# The project's reference session image, built locally (no registry pulls are possible here):
# FROM scratch + Node 24 and the shared libraries it links + busybox-static + the reference
# agent and v1alpha2 adapter sources (/app: runtimes/reference, runtimes/kit, contracts, zod).
# Pushed to the local registry; the digest the registry gave it is recorded in
# $TB_STATE/reference-image.json for tests and for `serve`.
TB_IMAGE_REPO=$TB_REGISTRY/agent-sessions/reference

tb_image_hash() {
  # Rebuild when the sources, the Node version or this recipe change.
  { cat "$TB_REPO/scripts/testbed.d/image.sh"; tb_runtime_sources_hash reference; echo "$TB_NODE_VERSION"; } | sha256sum | cut -c1-16
}

tb_image_up() {
  local hash; hash=$(tb_image_hash)
  tb_image_cached "$TB_IMAGE_REPO" reference-image "$hash" && return 0
  local ctx=$TB_HOME/image-build
  rm -rf "$ctx" && mkdir -p "$ctx/rootfs/bin" "$ctx/workspace" "$ctx/rootfs/tmp"
  cp "$TB_NODE_DIR/bin/node" "$ctx/rootfs/bin/node"
  # The shared libraries node links against, at the paths the dynamic loader expects.
  local lib
  for lib in $(ldd "$TB_NODE_DIR/bin/node" | grep -oE '/[^ ]+'); do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
  done
  cp /bin/busybox "$ctx/rootfs/bin/busybox"
  for a in sh cat ls echo mkdir rm sleep env id wget kill ps; do ln -sf busybox "$ctx/rootfs/bin/$a"; done
  tb_runtime_app reference "$ctx/rootfs/app"
  printf 'root:x:0:0:root:/:/bin/sh\nagent:x:65532:65532:agent:/workspace:/bin/sh\n' >"$ctx/rootfs/etc-passwd"
  mkdir -p "$ctx/rootfs/etc" && mv "$ctx/rootfs/etc-passwd" "$ctx/rootfs/etc/passwd"
  cat >"$ctx/Dockerfile" <<'DF'
FROM scratch
COPY rootfs/ /
# COPY makes everything root's; the session user owns its workspace, and a new Docker volume
# mounted there takes this directory's ownership.
COPY --chown=65532:65532 workspace /workspace
ENV PATH=/bin HOME=/workspace NODE_ENV=production
USER 65532:65532
WORKDIR /workspace
EXPOSE 8080
ENTRYPOINT ["/bin/node", "/app/runtimes/reference/adapter-main.ts"]
DF
  chmod 1777 "$ctx/rootfs/tmp"
  tb_build_and_push_image "$TB_IMAGE_REPO" reference-image "$hash" "$ctx"
}

tb_image_status() { tb_image_status_line image reference-image image; }
