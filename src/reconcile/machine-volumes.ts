import type { Store } from '../store/types.js';

/**
 * Which volumes each VM has open, so that a volume detached by a delete
 * (left `mounted`, docs/machines.md) becomes `available` only once no VM
 * uses it: another instance's boot runs `e2fsck` on it.
 */
export class VmVolumes {
  private readonly open = new Map<string, Set<string>>();

  /** A VM of `instanceId` is (about to be) running with these volumes. */
  track(instanceId: string, volumeIds: string[]): void {
    this.open.set(instanceId, new Set(volumeIds));
  }

  /** The VM of `instanceId` is gone. */
  untrack(instanceId: string): void {
    this.open.delete(instanceId);
  }

  /** Unattached volumes still `mounted` whose VM is gone become `available`. */
  async release(store: Store): Promise<void> {
    const inUse = new Set([...this.open.values()].flatMap((s) => [...s]));
    await store.tx(async (tx) => {
      for (const v of await tx.volumes.all())
        if (v.instance_id === null && v.state === 'mounted' && !inUse.has(v.id))
          await tx.volumes.update(v.id, { state: 'available' });
    });
  }
}
