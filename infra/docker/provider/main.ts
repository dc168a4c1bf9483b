/**
 * Entry of the `pulumi-resource-agent-sessions-docker` plugin: the engine starts it, it prints
 * its gRPC port and serves the provider protocol.
 */
import { main } from "@pulumi/pulumi/provider/index.js";
import { DockerSessionProvider } from "./provider.ts";

await main(new DockerSessionProvider(), process.argv.slice(2));
