/**
 * Stable reason strings of AgentSession state changes (the `reason` of GetAgentStatus and of
 * status frames). Clients switch on them; never reword one. A runner may report engine reasons
 * of its own (e.g. `AdapterExited`, `OOMKilled`, `EngineRestart`, `ContainerRemoved`).
 */
export const SessionReasons = {
  /** A deliberate StopAgentSession. */
  Stopped: "Stopped",
  /** The stop half of a ReloadAgentSession. */
  Reload: "Reload",
  /** The runner link was lost; the reattach window runs. */
  RunnerDisconnected: "RunnerDisconnected",
  /** The runner did not reattach within the window. */
  ReattachExpired: "ReattachExpired",
  /** The runner reattached without the session in its authoritative set. */
  LostByRunner: "LostByRunner",
  /** The runner refused or failed the start. */
  StartFailed: "StartFailed",
  /** The runner no longer has the session's container. */
  ContainerNotFound: "ContainerNotFound",
  /** A replacement ProvisionAgentWorkspace retired this ERRORED session; it can still be resumed. */
  Retired: "Retired",
  /** RemoveAgentWorkspace removed the session's workspace. */
  WorkspaceRemoved: "WorkspaceRemoved",
} as const;
export type SessionReason = (typeof SessionReasons)[keyof typeof SessionReasons];
