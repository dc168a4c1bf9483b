# shellcheck shell=bash
# The `hermes` runtime image: FROM the session base image (base-image.sh, pinned by its registry
# digest) + Debian bookworm's Python 3.11 (the .debs the base image lacks, unpacked with
# `dpkg -x`) + Hermes (`hermes-agent[acp]` from PyPI, installed on the host into a cached
# directory, byte-compiled in the image by the image's own Python) + Node 24 + the project's
# v1alpha2 adapter around `hermes acp` (runtimes/hermes/). Pushed to the local registry; the
# digest the registry gave it is recorded in $TB_STATE/hermes-image.json, which `serve` registers
# as AgentRuntime `default/hermes`.
#
# Sourced after common.sh, node.sh, base-image.sh and pi-image.sh.
#
# Layout (runtimes/hermes/hermes-agent.ts relies on it):
#   /usr/bin/python3.11                       Debian's Python 3.11 (+ its stdlib, sqlite3, readline)
#   /opt/hermes                               a venv of that Python: pyvenv.cfg, bin/python,
#                                             lib/python3.11/site-packages (hermes-agent and deps)
#   /usr/local/bin/node                       Node 24 (runs the adapter)
#   /app/{runtimes/hermes,runtimes/kit,contracts}
TB_HERMES_IMAGE_REPO=$TB_REGISTRY/agent-sessions/hermes
TB_HERMES_VERSION=0.19.0
TB_HERMES_DIR=$TB_HOME/hermes-agent-$TB_HERMES_VERSION
# Debian packages Python 3.11 needs beyond what the base image holds (apt-cache depends
# --recurse python3.11, minus the base image's dpkg list, measured on bookworm).
TB_HERMES_DEBS=(python3.11 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
  libsqlite3-0 libreadline8 readline-common libncursesw6 libnsl2 libtirpc3 libtirpc-common
  media-types)

tb_hermes_install() {
  [[ -f $TB_HERMES_DIR/.installed ]] && return 0
  local py; py=$(command -v python3)
  "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || { tb_say "hermes: needs a host python3 3.11 with pip (the image's Python is 3.11); found $("$py" --version 2>&1)"; return 1; }
  rm -rf "$TB_HERMES_DIR" && mkdir -p "$TB_HERMES_DIR"
  # Wheels for CPython 3.11 on glibc; nothing is compiled here (byte-code is, in the image).
  "$py" -m pip install --disable-pip-version-check --no-compile --no-warn-script-location \
    --target "$TB_HERMES_DIR/site-packages" "hermes-agent[acp]==$TB_HERMES_VERSION" >"$TB_LOG/hermes-install.log" 2>&1 \
    || { tail -20 "$TB_LOG/hermes-install.log" >&2; return 1; }
  # Console scripts name the host's interpreter; the adapter runs modules with the venv's python.
  rm -rf "$TB_HERMES_DIR/site-packages/bin"
  find "$TB_HERMES_DIR/site-packages" -name '__pycache__' -type d -prune -exec rm -rf {} +
  touch "$TB_HERMES_DIR/.installed"
}

tb_hermes_debs() {
  local dir=$TB_HOME/hermes-debs
  [[ -f $dir/.downloaded ]] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && apt-get download -q "${TB_HERMES_DEBS[@]}" >"$TB_LOG/hermes-debs.log" 2>&1) \
    || { tail -20 "$TB_LOG/hermes-debs.log" >&2; return 1; }
  touch "$dir/.downloaded"
}

tb_hermes_image_hash() {
  {
    cat "$TB_REPO/scripts/testbed.d/hermes-image.sh"
    (cd "$TB_REPO" && { find runtimes/hermes runtimes/kit contracts \( -name '*.ts' -o -name '*.py' \) ! -name '*.test.ts'; } | LC_ALL=C sort | xargs sha256sum)
    cat "$TB_REPO/node_modules/zod/package.json"
    grep '"digest"' "$TB_STATE/base-image.json"
    echo "$TB_NODE_VERSION $TB_HERMES_VERSION"
  } | sha256sum | cut -c1-16
}

_tb_hermes_image_cached() {
  local hash=$1
  [[ -f $TB_STATE/hermes-image.json ]] && grep -q "\"sourceHash\": \"$hash\"" "$TB_STATE/hermes-image.json" &&
    curl -fsS -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$TB_REGISTRY/v2/agent-sessions/hermes/manifests/$hash"
}

tb_hermes_image_up() {
  [[ -x $TB_NODE_DIR/bin/node ]] || tb_node_up
  tb_base_image_up
  local hash; hash=$(tb_hermes_image_hash)
  if _tb_hermes_image_cached "$hash"; then
    docker image inspect "$TB_HERMES_IMAGE_REPO:$hash" >/dev/null 2>&1 || docker pull -q "$TB_HERMES_IMAGE_REPO:$hash" >/dev/null
    return 0
  fi
  tb_hermes_install
  tb_hermes_debs
  local base; base=$(grep '"image"' "$TB_STATE/base-image.json" | cut -d'"' -f4)
  local ctx=$TB_HOME/hermes-image-build
  rm -rf "$ctx" && mkdir -p "$ctx/node" "$ctx/python" "$ctx/hermes/bin" "$ctx/hermes/lib/python3.11" "$ctx/app/node_modules"
  cp "$TB_NODE_DIR/bin/node" "$ctx/node/node"
  local deb
  for deb in "$TB_HOME"/hermes-debs/*.deb; do dpkg-deb -x "$deb" "$ctx/python"; done
  # The base image is merged-/usr (/lib, /bin, /sbin are symlinks): files go under /usr, or
  # COPY would replace those symlinks with directories.
  local d
  for d in lib bin sbin; do
    if [[ -d $ctx/python/$d ]]; then mkdir -p "$ctx/python/usr/$d" && cp -a "$ctx/python/$d/." "$ctx/python/usr/$d/" && rm -rf "${ctx:?}/python/$d"; fi
  done
  rm -rf "$ctx/python/usr/share/doc" "$ctx/python/usr/share/man" "$ctx/python/usr/share/info" "$ctx/python/usr/share/locale" "$ctx/python/etc"
  cp -a "$TB_HERMES_DIR/site-packages" "$ctx/hermes/lib/python3.11/site-packages"
  # A venv of the image's Python at the path it has in the image.
  ln -s /usr/bin/python3.11 "$ctx/hermes/bin/python"
  printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11\nexecutable = /usr/bin/python3.11\n' >"$ctx/hermes/pyvenv.cfg"
  (cd "$TB_REPO" && { find runtimes/hermes runtimes/kit contracts \( -name '*.ts' -o -name '*.py' \) ! -name '*.test.ts'; } | xargs cp --parents -t "$ctx/app")
  cp -r "$TB_REPO/node_modules/zod" "$ctx/app/node_modules/zod"
  printf '{"type":"module","private":true}\n' >"$ctx/app/package.json"
  cat >"$ctx/Dockerfile" <<DF
FROM $base
COPY python/ /
COPY hermes/ /opt/hermes/
USER 0:0
# Byte-code by the image's own interpreter, checked by hash (never against mtimes): the root is
# read-only at run time, so Python could not write it then.
# The import check runs with a throwaway HERMES_HOME: importing Hermes creates it (root-owned in
# /workspace it would break every session).
RUN /opt/hermes/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/hermes/lib/python3.11/site-packages /usr/lib/python3.11 >/dev/null; \\
    HOME=/tmp/check HERMES_HOME=/tmp/check /opt/hermes/bin/python -c 'import acp, acp_adapter.server, sqlite3, ssl' && \\
    rm -rf /tmp/check && test -z "\$(ls -A /workspace)"
USER $TB_SESSION_UID:$TB_SESSION_UID
COPY node/ /usr/local/bin/
COPY app/ /app/
ENV NODE_ENV=production PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /workspace
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/node", "/app/runtimes/hermes/adapter-main.ts"]
DF
  docker build -q -t "$TB_HERMES_IMAGE_REPO:$hash" "$ctx" >"$TB_LOG/hermes-image.log" 2>&1 \
    || { tail -20 "$TB_LOG/hermes-image.log" >&2; return 1; }
  rm -rf "$ctx"
  docker push -q "$TB_HERMES_IMAGE_REPO:$hash" >/dev/null
  local digest size
  digest=$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$TB_HERMES_IMAGE_REPO:$hash" | grep "^$TB_HERMES_IMAGE_REPO@" | head -1)
  [[ $digest == *@sha256:* ]] || { tb_say "no registry digest for $TB_HERMES_IMAGE_REPO:$hash"; return 1; }
  size=$(docker image inspect --format '{{.Size}}' "$TB_HERMES_IMAGE_REPO:$hash")
  cat >"$TB_STATE/hermes-image.json" <<JSON
{
  "repository": "$TB_HERMES_IMAGE_REPO",
  "tag": "$hash",
  "sourceHash": "$hash",
  "image": "$digest",
  "digest": "${digest#*@}",
  "sizeBytes": $size,
  "hermesVersion": "$TB_HERMES_VERSION"
}
JSON
  tb_say "hermes image $digest ($((size / 1024 / 1024)) MiB)"
}

tb_hermes_image_status() {
  if [[ -f $TB_STATE/hermes-image.json ]]; then
    echo "hermes    $(grep '"image"' "$TB_STATE/hermes-image.json" | cut -d'"' -f4) ($(($(grep '"sizeBytes"' "$TB_STATE/hermes-image.json" | tr -dc 0-9) / 1024 / 1024)) MiB, $TB_STATE/hermes-image.json)"
  else echo "hermes    not built (scripts/testbed up hermes-image)"; fi
}
