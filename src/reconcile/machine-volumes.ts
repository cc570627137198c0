import type { Store } from '../store/types.js';

/**
 * Which volumes each VM has open, so that a volume detached by a delete
 * (left `mounted`, docs/machines.md) becomes `available` only once no VM
 * uses it: another instance's boot runs `e2fsck` on it.
 */
export class VmVolumes {
  private readonly open = new Map<string, Set<string>>();
  /** volumes held for a copy (`unihost admin backup`): how many holds each has */
  private readonly held = new Map<string, number>();

  /** A copy of `volumeId` is being taken: boots that would attach it wait (`isHeld`) until `unhold`. */
  hold(volumeId: string): void {
    this.held.set(volumeId, (this.held.get(volumeId) ?? 0) + 1);
  }

  unhold(volumeId: string): void {
    const n = (this.held.get(volumeId) ?? 1) - 1;
    if (n > 0) this.held.set(volumeId, n);
    else this.held.delete(volumeId);
  }

  isHeld(volumeIds: readonly string[]): boolean {
    return volumeIds.some((v) => this.held.has(v));
  }

  /** The instances whose VM has `volumeId` open (or is about to). */
  users(volumeId: string): string[] {
    return [...this.open].filter(([, vols]) => vols.has(volumeId)).map(([id]) => id);
  }

  /** Whether the VM of `instanceId` still has volumes tracked (false once it ended or its boot failed). */
  tracked(instanceId: string): boolean {
    return this.open.has(instanceId);
  }

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
