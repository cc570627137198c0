import type { Counter, Counters } from './types.js';

function counter(): Counter {
  return { openConnections: 0, requests: 0, bytesIn: 0, bytesOut: 0, lastActivity: 0 };
}

/**
 * Counters per group and per instance, and the open work per instance: each
 * TCP pipe, tunnel or in-flight HTTP request holds a lease that knows how to
 * cut it. The machine controller reads `connections()` while draining and
 * `disconnect()` cuts what is left when the drain timeout expires.
 */
export class Stats {
  private readonly groups = new Map<string, Counter>();
  private readonly instances = new Map<string, Counter & { groupId: string }>();
  private readonly leases = new Map<string, Set<() => void>>();
  private readonly idleWaiters = new Map<string, Set<() => void>>();

  constructor(
    private readonly hooks: {
      onIdle?: (instanceId: string) => void;
      onActivity?: (groupId: string, instanceId: string) => void;
    } = {},
  ) {}

  group(groupId: string): Counter {
    let c = this.groups.get(groupId);
    if (!c) this.groups.set(groupId, (c = counter()));
    return c;
  }

  instance(groupId: string, instanceId: string): Counter {
    let c = this.instances.get(instanceId);
    if (!c) this.instances.set(instanceId, (c = { ...counter(), groupId }));
    return c;
  }

  /** A client connection was attached to a group; returns the function that detaches it (idempotent). */
  clientConnection(groupId: string): () => void {
    const g = this.group(groupId);
    g.openConnections++;
    g.lastActivity = Date.now();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      g.openConnections--;
      g.lastActivity = Date.now();
    };
  }

  /**
   * Opens work on an instance (a request or a connection). `cut` aborts it;
   * the returned release (idempotent) must run when the work ends.
   */
  acquire(groupId: string, instanceId: string, cut: () => void): () => void {
    const now = Date.now();
    const i = this.instance(groupId, instanceId);
    const g = this.group(groupId);
    i.openConnections++;
    i.requests++;
    g.requests++;
    i.lastActivity = g.lastActivity = now;
    let set = this.leases.get(instanceId);
    if (!set) this.leases.set(instanceId, (set = new Set()));
    set.add(cut);
    this.hooks.onActivity?.(groupId, instanceId);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      i.openConnections--;
      i.lastActivity = Date.now();
      const s = this.leases.get(instanceId);
      s?.delete(cut);
      if (s && s.size === 0) {
        this.leases.delete(instanceId);
        this.idle(instanceId);
      }
    };
  }

  /** Adds traffic to a group and, when known, to the instance that carried it. */
  bytes(groupId: string, instanceId: string | undefined, bytesIn: number, bytesOut: number): void {
    const now = Date.now();
    const g = this.group(groupId);
    g.bytesIn += bytesIn;
    g.bytesOut += bytesOut;
    g.lastActivity = now;
    if (instanceId === undefined) return;
    const i = this.instance(groupId, instanceId);
    i.bytesIn += bytesIn;
    i.bytesOut += bytesOut;
    i.lastActivity = now;
  }

  connections(instanceId: string): number {
    return this.leases.get(instanceId)?.size ?? 0;
  }

  /** Cuts every connection and in-flight request of an instance; returns how many were cut. */
  disconnect(instanceId: string): number {
    const set = this.leases.get(instanceId);
    if (!set) return 0;
    const cuts = [...set];
    for (const cut of cuts) cut();
    return cuts.length;
  }

  /** Resolves once the instance has no open work (at once if it has none). */
  whenIdle(instanceId: string): { promise: Promise<void>; cancel: () => void } {
    if (this.connections(instanceId) === 0) return { promise: Promise.resolve(), cancel: () => {} };
    let set = this.idleWaiters.get(instanceId);
    if (!set) this.idleWaiters.set(instanceId, (set = new Set()));
    const waiters = set;
    let resolve!: () => void;
    const promise = new Promise<void>((r) => (resolve = r));
    waiters.add(resolve);
    return { promise, cancel: () => waiters.delete(resolve) };
  }

  private idle(instanceId: string): void {
    const waiters = this.idleWaiters.get(instanceId);
    this.idleWaiters.delete(instanceId);
    for (const w of waiters ?? []) w();
    this.hooks.onIdle?.(instanceId);
  }

  /** Drops the counters of an instance that no longer exists. */
  forgetInstance(instanceId: string): void {
    if (this.connections(instanceId) === 0) this.instances.delete(instanceId);
  }

  /** Drops the counters of groups that are gone and have no open client connection. */
  keepGroups(live: Set<string>): void {
    for (const [id, c] of this.groups) if (!live.has(id) && c.openConnections === 0) this.groups.delete(id);
  }

  snapshot(): Counters {
    const out: Counters = { groups: {}, instances: {} };
    for (const [id, c] of this.groups) out.groups[id] = { ...c };
    for (const [id, c] of this.instances) out.instances[id] = { ...c };
    return out;
  }
}
