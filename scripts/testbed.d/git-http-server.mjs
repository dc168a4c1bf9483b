// A small HTTP server in front of Debian's `git http-backend` (CGI, RFC 3875) for the test bed's
// fixture repositories: smart HTTP clone and fetch, read-only (receive-pack off). Repositories
// named `private-*.git` want HTTP Basic auth with the password in $GIT_SERVER_TOKEN_FILE.
// Listens on the one address given (the test bed bridge), never on 0.0.0.0.
//   node git-http-server.mjs ADDRESS PORT PROJECT_ROOT
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";

const [address, port, root] = process.argv.slice(2);
if (!address || !port || !root) {
  console.error("usage: git-http-server.mjs ADDRESS PORT PROJECT_ROOT");
  process.exit(2);
}
const tokenFile = process.env.GIT_SERVER_TOKEN_FILE;
const token = tokenFile ? readFileSync(tokenFile, "utf8").trim() : "";

function authorized(req, path) {
  if (!/^\/private-[^/]*\.git\//.test(path)) return true;
  const header = req.headers.authorization ?? "";
  if (!token || !header.startsWith("Basic ")) return false;
  const decoded = Buffer.from(header.slice(6), "base64").toString("utf8");
  return decoded.slice(decoded.indexOf(":") + 1) === token;
}

const server = createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://git");
  const path = decodeURIComponent(url.pathname);
  if (path.includes("..") || !/^\/[A-Za-z0-9._-]+\.git\//.test(path)) {
    res.writeHead(404).end("not found\n");
    return;
  }
  if (!authorized(req, path)) {
    res.writeHead(401, { "www-authenticate": 'Basic realm="git"' }).end("authentication required\n");
    return;
  }
  const cgi = spawn("git", ["http-backend"], {
    env: {
      PATH: process.env.PATH,
      GIT_PROJECT_ROOT: root,
      GIT_HTTP_EXPORT_ALL: "1",
      GATEWAY_INTERFACE: "CGI/1.1",
      REQUEST_METHOD: req.method ?? "GET",
      PATH_INFO: path,
      QUERY_STRING: url.search.slice(1),
      CONTENT_TYPE: req.headers["content-type"] ?? "",
      ...(req.headers["content-length"] ? { CONTENT_LENGTH: req.headers["content-length"] } : {}),
      ...(req.headers["content-encoding"] ? { HTTP_CONTENT_ENCODING: req.headers["content-encoding"] } : {}),
      ...(req.headers["git-protocol"] ? { GIT_PROTOCOL: String(req.headers["git-protocol"]) } : {}),
      REMOTE_ADDR: req.socket.remoteAddress ?? "",
      SERVER_PROTOCOL: "HTTP/1.1",
    },
    stdio: ["pipe", "pipe", "inherit"],
  });
  req.pipe(cgi.stdin);
  // The CGI answer: header lines up to an empty line, then the body as is.
  let head = Buffer.alloc(0);
  let headersDone = false;
  cgi.stdout.on("data", (chunk) => {
    if (headersDone) {
      res.write(chunk);
      return;
    }
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf("\r\n\r\n");
    if (end < 0) return;
    headersDone = true;
    let status = 200;
    const headers = {};
    for (const line of head.subarray(0, end).toString("latin1").split("\r\n")) {
      const colon = line.indexOf(":");
      const name = line.slice(0, colon).trim();
      const value = line.slice(colon + 1).trim();
      if (name.toLowerCase() === "status") status = Number.parseInt(value, 10);
      else headers[name] = value;
    }
    res.writeHead(status, headers);
    res.write(head.subarray(end + 4));
  });
  cgi.on("close", (code) => {
    if (!headersDone) res.writeHead(502).end(`git http-backend exited ${code}\n`);
    else res.end();
  });
});
server.listen(Number(port), address, () => console.error(`git server on http://${address}:${port}`));
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
