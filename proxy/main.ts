import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { createAdaptorServer } from "@hono/node-server";
import type { ChannelAdmission, InProcessDial } from "../contracts/runner-channel.ts";
import { composeServer, type ServerOverrides } from "./compose-server.ts";
import { parseConfig, type ServerConfig } from "./config.ts";
import { RUNNER_CONNECT_PATH } from "./runners/runner-hub.ts";
import { issueRunnerCredential } from "./runners/runner-identity.ts";
import { isPortUpgrade, portUpgrade } from "./http/port-socket.ts";

export type StartServerOptions = ServerOverrides;

export type RunningServer = {
  /** `http://host:port` of the API. */
  url: string;
  /** `ws://host:port/v1/runners/connect`: where runners dial. */
  runnerUrl: string;
  config: ServerConfig;
  /**
   * Issue runner `name` a new credential (its older one stops working): how `serve` gives its
   * embedded runner an identity in process, with nothing written or typed.
   */
  issueRunnerCredential(name: string): Promise<string>;
  /**
   * Where `serve`'s embedded runner dials in process (contracts/runner-channel.ts): the runner
   * link without the loopback socket, its bearer checked as on the WebSocket upgrade.
   */
  dialRunner: InProcessDial;
  /**
   * Where `serve`'s embedded runner in a worker thread is admitted: the server's end of its link
   * (contracts/runner-port-channel.ts), its bearer checked as on the upgrade.
   */
  admitRunnerChannel: ChannelAdmission;
  /** Stops accepting, closes runner links and event streams, closes the store. */
  close(): Promise<void>;
};

/**
 * Start the server in this process: the services of the composition root (compose-server.ts),
 * the HTTP API and the runner WebSocket on one port. Used by the CLI (`agent-sessions serve`) and
 * by tests (port 0).
 */
export async function startServer(
  config: ServerConfig,
  options: StartServerOptions = {},
): Promise<RunningServer> {
  const composed = await composeServer(config, options);
  const { hub, store, admission, log } = composed;
  const listening = createAdaptorServer({
    fetch: composed.app.fetch,
    hostname: config.host,
    port: config.port,
  }) as Server;
  const closeListener = async () => {
    const closed = new Promise<void>((resolve) => listening.close(() => resolve()));
    listening.closeAllConnections();
    await closed;
  };
  try {
    // A session's port (issue 40) through the app (port-socket.ts); anything else is a runner's link.
    const toPort = portUpgrade(composed.app);
    listening.on("upgrade", (request, socket, head) =>
      isPortUpgrade(request.url) ? toPort(request, socket, head) : hub.handleUpgrade(request, socket, head),
    );
    await new Promise<void>((resolve, reject) => {
      listening.once("error", reject);
      listening.listen(config.port, config.host, () => {
        listening.off("error", reject);
        resolve();
      });
    });
  } catch (error) {
    await composed.close();
    throw error;
  }

  const address = listening.address() as AddressInfo;
  // Asked for port 0: the port it got is the one sessions must not reach.
  admission.egress.addServerPort(address.port);
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  log("info", "server listening", {
    url,
    data_dir: config.dataDir,
    store: `${composed.stores.backend} ${composed.stores.location}`,
  });
  return {
    url,
    runnerUrl: `ws://${host}:${address.port}${RUNNER_CONNECT_PATH}`,
    config,
    issueRunnerCredential: async (name) => {
      const issued = await issueRunnerCredential(store, name);
      hub.closeLinksOf(name, issued.tokenHash);
      return issued.credential;
    },
    dialRunner: (bearer) => hub.dialInProcess(bearer),
    admitRunnerChannel: (bearer, channel) => hub.admitChannel(bearer, channel),
    close: () => composed.close(closeListener),
  };
}

/** `node proxy/main.ts`: the server alone, configured from the environment. */
async function main(): Promise<void> {
  const config = parseConfig();
  const running = await startServer(config);
  process.stderr.write(
    `agent-sessions server on ${running.url}; admin token: ${config.adminTokenFile ?? "$AGENT_SESSIONS_TOKEN"}\n`,
  );
  const stop = (signal: string) => {
    process.stderr.write(`${signal}: shutting down\n`);
    running.close().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`shutdown failed: ${String(error)}\n`);
        process.exit(1);
      },
    );
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
}

if (import.meta.main) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
