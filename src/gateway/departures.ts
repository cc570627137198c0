import type { Backend } from './types.js';

/**
 * Instances taken out of the data plane ahead of their stop (`leave`),
 * ordered against reads of what should route: the gateway controller's
 * reads of the store, and the HAProxy plane's applies of a backend table. A
 * table read before the leave still has such an instance `running`: applied
 * after the leave, it would send traffic back to a VM about to end (in TCP
 * mode HAProxy then spends its connect retries on it and the scale-to-zero
 * activator never hears of the connection). Until a read begun after the
 * leave says what the instance is, it gets no new traffic; that read is the
 * truth (still stopping, or running again).
 */
export class Departures {
  private reads = 0;
  /** instance id -> reads begun when it left */
  private readonly left = new Map<string, number>();

  /** A read of the store's instances begins; returns its stamp. */
  beginRead(): number {
    return ++this.reads;
  }

  leave(instanceId: string): void {
    this.left.set(instanceId, this.reads);
  }

  /** Backends of the read stamped `read`, with the instances that left since it began taken out. */
  keep(list: Backend[], read: number): Backend[] {
    if (this.left.size === 0) return list;
    return list.map((b) => (this.leftSince(b.instanceId, read) ? { ...b, state: 'other' } : b));
  }

  /** A read of every instance, stamped `read`, is in force: the leaves before it began are settled by it. */
  settle(read: number): void {
    for (const [id, at] of this.left) if (at < read) this.left.delete(id);
  }

  /** Whether the instance left after the read stamped `read` began. */
  leftSince(instanceId: string, read: number): boolean {
    const at = this.left.get(instanceId);
    return at !== undefined && at >= read;
  }
}
