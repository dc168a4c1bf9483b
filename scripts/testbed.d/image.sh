# shellcheck shell=bash
# The project's reference session image, built locally (no registry pulls are possible here):
# FROM scratch + Node 24 and the shared libraries it links + busybox-static + the reference
# agent and v1alpha2 adapter sources. Pushed to the local registry; the digest the registry gave
# it is recorded in $TB_STATE/reference-image.json for tests and for `serve`.
TB_IMAGE_REPO=$TB_REGISTRY/agent-sessions/reference

tb_image_hash() {
  # Rebuild when the sources, the Node version or this recipe change.
  (cd "$TB_REPO" && cat scripts/testbed.d/image.sh runtimes/reference/*.ts runtimes/kit/*.ts contracts/*.ts node_modules/zod/package.json 2>/dev/null; echo "$TB_NODE_VERSION") | sha256sum | cut -c1-16
}

tb_image_up() {
  local hash; hash=$(tb_image_hash)
  if [[ -f $TB_STATE/reference-image.json ]] && grep -q "\"sourceHash\": \"$hash\"" "$TB_STATE/reference-image.json" \
    && curl -fsS -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "http://$TB_REGISTRY/v2/agent-sessions/reference/manifests/$hash"; then
    # The registry still holds it; make sure the engine does too (a fresh data root may not).
    docker image inspect "$TB_IMAGE_REPO:$hash" >/dev/null 2>&1 || docker pull -q "$TB_IMAGE_REPO:$hash" >/dev/null
    return 0
  fi
  local ctx=$TB_HOME/image-build
  rm -rf "$ctx" && mkdir -p "$ctx/rootfs/bin" "$ctx/rootfs/app/node_modules" "$ctx/workspace" "$ctx/rootfs/tmp"
  cp "$TB_NODE_DIR/bin/node" "$ctx/rootfs/bin/node"
  # The shared libraries node links against, at the paths the dynamic loader expects.
  local lib
  for lib in $(ldd "$TB_NODE_DIR/bin/node" | grep -oE '/[^ ]+'); do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
  done
  cp /bin/busybox "$ctx/rootfs/bin/busybox"
  for a in sh cat ls echo mkdir rm sleep env id wget kill ps; do ln -sf busybox "$ctx/rootfs/bin/$a"; done
  mkdir -p "$ctx/rootfs/app/runtimes" && cp -r "$TB_REPO/runtimes/reference" "$TB_REPO/runtimes/kit" "$ctx/rootfs/app/runtimes/" && cp -r "$TB_REPO/contracts" "$ctx/rootfs/app/"
  rm -f "$ctx"/rootfs/app/*/*.test.ts "$ctx"/rootfs/app/*/*/*.test.ts
  cp -r "$TB_REPO/node_modules/zod" "$ctx/rootfs/app/node_modules/zod"
  printf '{"type":"module","private":true}\n' >"$ctx/rootfs/app/package.json"
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
  docker build -q -t "$TB_IMAGE_REPO:$hash" "$ctx" >/dev/null
  docker push -q "$TB_IMAGE_REPO:$hash" >/dev/null
  local digest
  digest=$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$TB_IMAGE_REPO:$hash" | grep "^$TB_IMAGE_REPO@" | head -1)
  [[ $digest == *@sha256:* ]] || { tb_say "no registry digest for $TB_IMAGE_REPO:$hash"; return 1; }
  cat >"$TB_STATE/reference-image.json" <<JSON
{
  "repository": "$TB_IMAGE_REPO",
  "tag": "$hash",
  "sourceHash": "$hash",
  "image": "$digest",
  "digest": "${digest#*@}"
}
JSON
  tb_say "reference image $digest"
}

tb_image_status() {
  if [[ -f $TB_STATE/reference-image.json ]]; then
    echo "image     $(grep '"image"' "$TB_STATE/reference-image.json" | cut -d'"' -f4) (recorded in $TB_STATE/reference-image.json)"
  else echo "image     not built (scripts/testbed up image)"; fi
}
