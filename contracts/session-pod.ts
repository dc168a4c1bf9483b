/**
 * Names inside a Kubernetes session pod that the stack program (infra/kubernetes/session.ts) and
 * the runner (runner/kubernetes*.ts) share. Plain values: the runner never loads the Pulumi SDK.
 */

/** The container the adapter runs in and the runner execs the agent into. */
export const ADAPTER_CONTAINER = "adapter";
/** The sidecar the runner execs the workspace files API, repo seed and diff into (spec.kubernetes.workspaceImage). */
export const WORKSPACE_CONTAINER = "workspace";
/** Where the sidecar keeps a diff's throwaway index and objects: its own emptyDir, never the agent's /tmp. */
export const WORKSPACE_SCRATCH = "/scratch";
