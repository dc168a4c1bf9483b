import { PolicyPack } from "@pulumi/policy";
import { policies } from "./policy-list.ts";

// The pack's entry point. `new PolicyPack` reads ./package.json from the working directory (the
// engine starts the pack in this directory), serves the Analyzer gRPC service and prints its port
// for the engine: so nothing but this file may construct it.
new PolicyPack("agent-sessions", { policies, enforcementLevel: "mandatory" });
