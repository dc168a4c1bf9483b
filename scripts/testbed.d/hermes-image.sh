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
#                                             lib/python3.11/site-packages (hermes-agent and deps),
#                                             agent-sessions-tool-modules.json (hermes_tools.py)
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

tb_hermes_image_hash() { tb_runtime_image_hash hermes "$TB_NODE_VERSION" "$TB_HERMES_VERSION"; }

tb_hermes_image_up() {
  [[ -x $TB_NODE_DIR/bin/node ]] || tb_node_up
  tb_base_image_up
  local hash; hash=$(tb_hermes_image_hash)
  tb_image_cached "$TB_HERMES_IMAGE_REPO" hermes-image "$hash" && return 0
  tb_hermes_install
  tb_hermes_debs
  local base; base=$(grep '"image"' "$TB_STATE/base-image.json" | cut -d'"' -f4)
  local ctx=$TB_HOME/hermes-image-build
  rm -rf "$ctx" && mkdir -p "$ctx/node" "$ctx/python" "$ctx/hermes/bin" "$ctx/hermes/lib/python3.11"
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
  tb_runtime_app hermes "$ctx/app"
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
# Which tool module registers which tool, found by Hermes' own discovery: a session imports only
# those of its toolsets (runtimes/hermes/hermes_tools.py). Throwaway HERMES_HOME as above.
USER 0:0
RUN HOME=/tmp/check HERMES_HOME=/tmp/check /opt/hermes/bin/python /app/runtimes/hermes/hermes_tools.py \
      --write-index /opt/hermes/agent-sessions-tool-modules.json && \
    rm -rf /tmp/check && test -z "\$(ls -A /workspace)"
USER $TB_SESSION_UID:$TB_SESSION_UID
WORKDIR /workspace
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/node", "/app/runtimes/hermes/adapter-main.ts"]
DF
  tb_build_and_push_image "$TB_HERMES_IMAGE_REPO" hermes-image "$hash" "$ctx" "hermesVersion=$TB_HERMES_VERSION"
}

tb_hermes_image_status() { tb_image_status_line hermes hermes-image hermes-image; }
