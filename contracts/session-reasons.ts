/**
 * Stable reason strings of AgentSession state changes (the `reason` of GetAgentStatus and of
 * status frames). Clients switch on them; never reword one. A runner may report engine reasons
 * of its own (e.g. `AdapterExited`, `OOMKilled`, `EngineRestarted`, `ContainerRemoved`).
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
  /**
   * A restarted runner found the session's workload not running: it stopped while the runner was
   * down (an engine restart stops every container; or it exited, or was stopped). The agent could
   * not be started again. A HarnessSession that should run is brought back up by the server.
   */
  WorkspaceNotRunning: "WorkspaceNotRunning",
  /** RemoveAgentWorkspace removed the session's workspace. */
  WorkspaceRemoved: "WorkspaceRemoved",
} as const;
export type SessionReason = (typeof SessionReasons)[keyof typeof SessionReasons];
