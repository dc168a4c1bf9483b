# shellcheck shell=bash
# The session base image: a root filesystem made from Debian packages by mmdebstrap (Debian's
# own bootstrapper, run against the archive apt already uses), imported with `docker import`.
# Real harnesses need what a `FROM scratch` + Node image lacks: glibc and libstdc++ (Node, Bun,
# natives), a shell and coreutils for their bash tools, git, CA certificates.
#
# The image runs as uid/gid 65532 (`agent`, home /workspace), the non-root user every session
# workload is started as (infra/docker/session.ts, infra/kubernetes/session.ts); its root is
# meant to be mounted read-only: only /workspace (the session volume) and /tmp (a tmpfs) are
# written. Setuid/setgid bits are cleared: nothing in a session may gain privileges.
#
# Cached: rebuilt only when this recipe (the package list is in it) changes; pushed to the local
# registry, and the digest the registry gave it recorded in $TB_STATE/base-image.json, which the
# runtime images built FROM it pin (scripts/testbed.d/pi-image.sh).
TB_BASE_IMAGE_REPO=$TB_REGISTRY/agent-sessions/base
TB_BASE_SUITE=bookworm
TB_BASE_MIRROR=http://deb.debian.org/debian
# On top of the Essential set (--variant=essential: bash, dash, coreutils, grep, sed, tar, …).
TB_BASE_PACKAGES=(ca-certificates git libstdc++6)
TB_SESSION_UID=65532

tb_base_image_hash() {
  sha256sum "$TB_REPO/scripts/testbed.d/base-image.sh" | cut -c1-16
}

_tb_base_image_cached() {
  local hash=$1
  [[ -f $TB_STATE/base-image.json ]] && grep -q "\"sourceHash\": \"$hash\"" "$TB_STATE/base-image.json" &&
    curl -fsS -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$TB_REGISTRY/v2/agent-sessions/base/manifests/$hash"
}

tb_base_image_up() {
  local hash; hash=$(tb_base_image_hash)
  if _tb_base_image_cached "$hash"; then
    # The registry still holds it; make sure the engine does too (a fresh data root may not).
    docker image inspect "$TB_BASE_IMAGE_REPO:$hash" >/dev/null 2>&1 || docker pull -q "$TB_BASE_IMAGE_REPO:$hash" >/dev/null
    return 0
  fi
  tb_apt_install mmdebstrap
  local work=$TB_HOME/base-image-build
  rm -rf "$work" && mkdir -p "$work"
  local uid=$TB_SESSION_UID
  # Docs, man pages and locales are dropped at unpack time (copyright files kept).
  local includes; includes=$(IFS=,; echo "${TB_BASE_PACKAGES[*]}")
  mmdebstrap --quiet --variant=essential --include="$includes" --format=tar \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook="echo 'agent:x:$uid:$uid:agent:/workspace:/bin/bash' >>\"\$1/etc/passwd\"" \
    --customize-hook="echo 'agent:x:$uid:' >>\"\$1/etc/group\"" \
    --customize-hook="install -d -o $uid -g $uid -m 0755 \"\$1/workspace\"" \
    --customize-hook="chmod 1777 \"\$1/tmp\"" \
    --customize-hook="find \"\$1\" -xdev -type f -perm /6000 -exec chmod ug-s {} +" \
    "$TB_BASE_SUITE" "$work/rootfs.tar" "$TB_BASE_MIRROR" >"$TB_LOG/base-image.log" 2>&1 \
    || { tail -20 "$TB_LOG/base-image.log" >&2; return 1; }
  docker import \
    --change "USER $uid:$uid" \
    --change 'WORKDIR /workspace' \
    --change 'ENV HOME=/workspace PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    "$work/rootfs.tar" "$TB_BASE_IMAGE_REPO:$hash" >/dev/null
  rm -rf "$work"
  docker push -q "$TB_BASE_IMAGE_REPO:$hash" >/dev/null
  local digest size
  digest=$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$TB_BASE_IMAGE_REPO:$hash" | grep "^$TB_BASE_IMAGE_REPO@" | head -1)
  [[ $digest == *@sha256:* ]] || { tb_say "no registry digest for $TB_BASE_IMAGE_REPO:$hash"; return 1; }
  size=$(docker image inspect --format '{{.Size}}' "$TB_BASE_IMAGE_REPO:$hash")
  cat >"$TB_STATE/base-image.json" <<JSON
{
  "repository": "$TB_BASE_IMAGE_REPO",
  "tag": "$hash",
  "sourceHash": "$hash",
  "image": "$digest",
  "digest": "${digest#*@}",
  "sizeBytes": $size,
  "packages": "essential,$includes"
}
JSON
  tb_say "base image $digest ($((size / 1024 / 1024)) MiB)"
}

tb_base_image_status() {
  if [[ -f $TB_STATE/base-image.json ]]; then
    echo "base      $(grep '"image"' "$TB_STATE/base-image.json" | cut -d'"' -f4) ($(($(grep '"sizeBytes"' "$TB_STATE/base-image.json" | tr -dc 0-9) / 1024 / 1024)) MiB, $TB_STATE/base-image.json)"
  else echo "base      not built (scripts/testbed up base-image)"; fi
}
