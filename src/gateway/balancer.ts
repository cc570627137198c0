import type { Backend } from './types.js';

/**
 * Round-robin choice among a group's `running` backends. The list comes from
 * the owner on every call (it changes as instances start, stop and drain);
 * `drain()` marks an instance locally so that it gets nothing new even
 * before the owner's list says `draining`.
 */
export class Balancer {
  private readonly next = new Map<string, number>();
  private readonly draining = new Set<string>();

  constructor(
    private readonly backends: (groupId: string) => Backend[],
    private readonly onNoBackend?: (groupId: string) => Promise<boolean>,
  ) {}

  /** The next running backend of the group that is not in `exclude`, or undefined. */
  pick(groupId: string, exclude?: ReadonlySet<string>): Backend | undefined {
    const all = this.backends(groupId);
    const n = all.length;
    if (n === 0) return undefined;
    const start = this.next.get(groupId) ?? 0;
    for (let k = 0; k < n; k++) {
      const i = (start + k) % n;
      const b = all[i]!;
      if (b.state !== 'running' || this.draining.has(b.instanceId) || exclude?.has(b.instanceId)) continue;
      this.next.set(groupId, (i + 1) % n);
      return b;
    }
    return undefined;
  }

  /**
   * Like pick, but when the group has no running backend at all (not merely
   * all excluded) asks `onNoBackend` to bring one up and tries again.
   */
  async pickOrWake(groupId: string, exclude?: ReadonlySet<string>): Promise<Backend | undefined> {
    const b = this.pick(groupId, exclude);
    if (b || !this.onNoBackend || (exclude && exclude.size > 0)) return b;
    return (await this.onNoBackend(groupId)) ? this.pick(groupId, exclude) : undefined;
  }

  /** Whether a backend may still take new work (used for requests on open connections). */
  accepts(b: Backend): boolean {
    return b.state === 'running' && !this.draining.has(b.instanceId);
  }

  markDraining(instanceId: string): void {
    this.draining.add(instanceId);
  }

  unmarkDraining(instanceId: string): void {
    this.draining.delete(instanceId);
  }

  forgetGroup(groupId: string): void {
    this.next.delete(groupId);
  }
}
