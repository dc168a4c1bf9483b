# shellcheck shell=bash
# A real git server for the tests (issue 18): Debian's `git http-backend` behind a small HTTP
# server (git-http-server.mjs, run by the test bed's Node) on the test bed bridge only
# ($TB_BRIDGE's address, never 0.0.0.0), so session containers reach it through their network's
# gateway like the loopback model server: an Agent allows `$TB_GIT_ADDRESS/32:$TB_GIT_PORT` in
# its egress. It serves bare fixture repositories, made here deterministically (fixed authors and
# dates, so commit ids are the same on every machine):
#   fixture.git          main: "first" (README.md, src/hello.txt; tag v1) then "second" (src/hello.txt changed, NOTES.md)
#   private-fixture.git  the same, behind HTTP Basic auth (password: the contents of $TB_GIT_TOKEN_FILE)
TB_GIT_HOME=$TB_HOME/git
TB_GIT_ADDRESS=${TB_BRIDGE_CIDR%/*}
TB_GIT_PORT=8418
TB_GIT_URL=http://$TB_GIT_ADDRESS:$TB_GIT_PORT
TB_GIT_TOKEN_FILE=$TB_GIT_HOME/token

tb_git_hash() {
  cat "$TB_REPO/scripts/testbed.d/git.sh" "$TB_REPO/scripts/testbed.d/git-http-server.mjs" | sha256sum | cut -c1-16
}

_tb_git_fixture() {
  local repos=$TB_GIT_HOME/repos work=$TB_GIT_HOME/work
  rm -rf "$repos" "$work" && mkdir -p "$repos" "$work"
  local g=(git -C "$work" -c init.defaultBranch=main -c user.name=Fixture -c user.email=fixture@agent-sessions.test -c commit.gpgsign=false)
  export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
  "${g[@]}" init -q
  mkdir -p "$work/src"
  printf '# fixture\n\nA small repository for the agent-sessions tests.\n' >"$work/README.md"
  printf 'hello\n' >"$work/src/hello.txt"
  "${g[@]}" add -A && "${g[@]}" commit -q -m first
  "${g[@]}" tag -a v1 -m "version 1"
  export GIT_AUTHOR_DATE="2026-01-02T00:00:00Z" GIT_COMMITTER_DATE="2026-01-02T00:00:00Z"
  printf 'hello\nworld\n' >"$work/src/hello.txt"
  printf 'notes of the second commit\n' >"$work/NOTES.md"
  "${g[@]}" add -A && "${g[@]}" commit -q -m second
  unset GIT_AUTHOR_DATE GIT_COMMITTER_DATE
  git clone -q --bare "$work" "$repos/fixture.git"
  git clone -q --bare "$work" "$repos/private-fixture.git"
  local r
  for r in "$repos"/*.git; do
    git -C "$r" config http.receivepack false
    git -C "$r" config uploadpack.allowReachableSHA1InWant true
  done
  rm -rf "$work"
}

tb_git_up() {
  tb_apt_install git
  [[ -x $TB_BIN/node ]] || { tb_say "git server needs node (scripts/testbed up node)"; return 1; }
  # (Read whole first: `grep -q` closing the pipe early fails the pipeline under pipefail.)
  local addrs; addrs=$(ip -o -4 addr show "$TB_BRIDGE" 2>/dev/null || true)
  [[ $addrs == *"inet $TB_GIT_ADDRESS/"* ]] ||
    { tb_say "git server needs the test bed bridge $TB_BRIDGE (scripts/testbed up docker)"; return 1; }
  local hash; hash=$(tb_git_hash)
  mkdir -p "$TB_GIT_HOME"
  if [[ ! -f $TB_STATE/git-server.json ]] || ! grep -q "\"sourceHash\": \"$hash\"" "$TB_STATE/git-server.json"; then
    tb_stop_pid git-server
    _tb_git_fixture
    cp "$TB_REPO/scripts/testbed.d/git-http-server.mjs" "$TB_GIT_HOME/git-http-server.mjs"
    [[ -s $TB_GIT_TOKEN_FILE ]] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$TB_GIT_TOKEN_FILE")
    local main v1
    main=$(git -C "$TB_GIT_HOME/repos/fixture.git" rev-parse main)
    v1=$(git -C "$TB_GIT_HOME/repos/fixture.git" rev-parse 'v1^{commit}')
    cat >"$TB_STATE/git-server.json" <<JSON
{
  "sourceHash": "$hash",
  "url": "$TB_GIT_URL",
  "address": "$TB_GIT_ADDRESS",
  "port": $TB_GIT_PORT,
  "repos": ["fixture.git", "private-fixture.git"],
  "commits": {"main": "$main", "v1": "$v1"},
  "tokenFile": "$TB_GIT_TOKEN_FILE"
}
JSON
  fi
  if tb_pid_alive git-server && curl -fsS -o /dev/null "$TB_GIT_URL/fixture.git/info/refs?service=git-upload-pack"; then return 0; fi
  GIT_SERVER_TOKEN_FILE=$TB_GIT_TOKEN_FILE setsid "$TB_BIN/node" "$TB_GIT_HOME/git-http-server.mjs" \
    "$TB_GIT_ADDRESS" "$TB_GIT_PORT" "$TB_GIT_HOME/repos" >"$TB_LOG/git-server.log" 2>&1 </dev/null 9>&- &
  echo $! >"$TB_RUN/git-server.pid"
  tb_wait_for "git server" 30 curl -fsS -o /dev/null "$TB_GIT_URL/fixture.git/info/refs?service=git-upload-pack" ||
    { tail -20 "$TB_LOG/git-server.log" >&2; return 1; }
}

tb_git_down() { tb_stop_pid git-server; }

tb_git_status() {
  if tb_pid_alive git-server; then echo "git       running (pid $(cat "$TB_RUN/git-server.pid")) at $TB_GIT_URL (fixture.git, private-fixture.git), $TB_STATE/git-server.json"
  else echo "git       not running (scripts/testbed up git)"; fi
}
