/**
 * The web UI's bundle (proxy/http/ui-route.ts): what the first `GET /ui/app.js` of a server
 * process costs, and what the browser gets.
 *
 *   node test/bench/ui-bundle-bench.ts [runs]   (default 5; no test bed needed)
 *
 * Each run is a fresh Node process (esbuild's module loaded and its service started, as in a
 * server nobody has opened the UI of yet) asking `uiRoutes()` for `/ui/app.js` twice: the first
 * answer (esbuild's build inside it, reported apart) and the second (from memory). Sizes: the
 * bundle's bytes and gzip -6 of them. p50 is nearest-rank.
 */
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import type { Logger } from "../../proxy/observability/log.ts";
import { uiRoutes } from "../../proxy/http/ui-route.ts";
import { p50 } from "./stats.ts";

type Run = { firstMs: number; buildMs: number; cachedMs: number; bytes: number; gzipBytes: number };

async function once(): Promise<Run> {
  let buildMs = Number.NaN;
  const log: Logger = (_level, msg, fields) => {
    if (msg === "web UI bundled") buildMs = Number(fields?.duration_ms);
  };
  const app = uiRoutes({ log });
  let started = performance.now();
  const first = await app.request("/ui/app.js");
  const text = await first.text();
  const firstMs = performance.now() - started;
  if (first.status !== 200) throw new Error(`GET /ui/app.js answered ${first.status}: ${text}`);
  started = performance.now();
  await (await app.request("/ui/app.js")).text();
  const cachedMs = performance.now() - started;
  return { firstMs, buildMs, cachedMs, bytes: Buffer.byteLength(text), gzipBytes: gzipSync(text).length };
}

if (process.argv[2] === "--once") {
  process.stdout.write(JSON.stringify(await once()));
  process.exit(0);
}

const runs = Number(process.argv[2] ?? 5);
if (!Number.isInteger(runs) || runs < 1)
  throw new Error(`runs must be a positive integer, got ${process.argv[2]}`);
const self = fileURLToPath(import.meta.url);
const results: Run[] = [];
for (let i = 0; i < runs; i++)
  results.push(JSON.parse(execFileSync(process.execPath, [self, "--once"], { encoding: "utf8" })) as Run);

const ms = (key: "firstMs" | "buildMs" | "cachedMs") => {
  const values = results.map((r) => r[key]);
  return `p50 ${p50(values).toFixed(1)} ms (min ${Math.min(...values).toFixed(1)}, max ${Math.max(...values).toFixed(1)})`;
};
const last = results.at(-1);
console.log(`web UI bundle, ${runs} fresh processes`);
console.log(`  first GET /ui/app.js  ${ms("firstMs")}`);
console.log(`    of which esbuild    ${ms("buildMs")}`);
console.log(`  cached GET            ${ms("cachedMs")}`);
console.log(`  size                  ${last?.bytes} bytes (${last?.gzipBytes} gzipped)`);
