import { KeyedMutex } from "../../contracts/keyed-mutex.ts";

/**
 * One task per key at a time: KeyedMutex within one process, or across every server replica over
 * one database (proxy/cluster/: an advisory lock per key behind the same method).
 */
export type KeyedLock = { run<T>(key: string, fn: () => Promise<T>): Promise<T> };

/** A KeyedLock per scope (`workspaces`, `sessions`, …): keys of two scopes never exclude each other. */
export type KeyedLocks = (scope: string) => KeyedLock;

/** The single-process locks: a KeyedMutex per scope. */
export const processLocks: KeyedLocks = () => new KeyedMutex();
