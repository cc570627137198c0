import type { Controller, ControllerDeps } from './deps.js';
import type { VolumeDriver } from '../volumes/driver.js';
import { follow, RetryingQueue } from './engine.js';
import type { VolumeRec } from '../store/types.js';

/**
 * Makes volume images match the store through the volume driver: formats
 * new volumes or copies the volume they clone (initializing → available, or
 * idle when attached), resizes a volume whose size changed (busy until done),
 * measures how full each is while no VM has it, removes the images of
 * deleted volumes, and marks a volume whose image went missing as `error`
 * with a message.
 */
export class VolumeController implements Controller {
  private readonly queue: RetryingQueue;
  private off: (() => void) | null = null;
  /** the state each volume's use was last measured in (measured again when it changes) */
  private readonly measured = new Map<string, string>();

  constructor(
    private readonly s: ControllerDeps,
    private readonly log: {
      info(o: object, m: string): void;
      warn(o: object, m: string): void;
      error(o: object, m: string): void;
    },
    /** the images (src/drivers.ts picks it from `volumes.driver`) */
    readonly images: VolumeDriver,
  ) {
    this.queue = new RetryingQueue(
      (id) => this.reconcile(id),
      (id, e, failures, retryMs) => log.error({ id, err: e, failures, retry_ms: retryMs }, 'volume reconcile failed'),
    );
  }

  async start(): Promise<void> {
    this.off = follow(this.s.store, {
      kinds: ['volume'],
      change: (c) => void this.queue.kick(c.id),
      resync: () => void this.kickAll(),
      resyncMs: this.s.config.store.resyncMs,
    });
    const all = await this.s.store.read((tx) => tx.volumes.all());
    for (const v of all) void this.queue.kick(v.id);
    const removed = this.images.prune(new Set(all.map((v) => v.id)));
    if (removed.length > 0) this.log.warn({ removed }, 'removed images of volumes that no longer exist');
  }

  async stop(): Promise<void> {
    this.off?.();
    await this.queue.stop();
  }

  /** Resync: every volume once more (a failed read is tried at the next resync). */
  private async kickAll(): Promise<void> {
    try {
      for (const v of await this.s.store.read((tx) => tx.volumes.all())) void this.queue.kick(v.id);
    } catch (e) {
      this.log.warn({ err: e }, 'volume resync: reading the store failed');
    }
  }

  private async reconcile(id: string): Promise<void> {
    const found = await this.s.store.read((tx) => tx.volumes.getAny(id));
    if (!found) return this.images.remove(id);
    // a volume's file is on one host: its agent's (docs/hosts.md)
    if (found.host_id !== this.s.hostId) return;
    const v = found;
    if (v.state === 'initializing' || v.state === 'uninitialized') return this.make(v);
    if (v.state === 'busy') return this.busy(v);
    if (v.state !== 'error' && !this.images.exists(id)) {
      this.log.warn({ id }, 'volume image file is missing');
      await this.s.store.tx((tx) =>
        tx.volumes.update(id, { state: 'error', message: `the image file ${this.images.path(id)} is missing` }),
      );
      return;
    }
    // how full it is, while no VM has it (a shrink is refused below it; `free_mb` shows it)
    if (
      (v.state === 'available' || v.state === 'idle' || v.state === 'template') &&
      this.measured.get(id) !== v.state
    ) {
      const used = await this.images.usedMb(id).catch(() => null);
      this.measured.set(id, v.state);
      if (used !== null && used !== v.used_mb)
        await this.s.store.tx(async (tx) => {
          const cur = await tx.volumes.getAny(id);
          if (cur && cur.state === v.state) await tx.volumes.update(id, { used_mb: used });
        });
    } else if (v.state === 'mounted') this.measured.delete(id);
  }

  /** A new volume: formatted empty, or a copy of the volume it is cloned from. */
  private async make(v: VolumeRec): Promise<void> {
    const id = v.id;
    try {
      if (v.source_id) await this.images.copy(v.source_id, id);
      else await this.images.format(id, v.size_mb);
    } catch (e) {
      const what = v.source_id ? 'copying the source volume' : 'formatting';
      await this.s.store.tx((tx) =>
        tx.volumes.update(id, { state: 'error', message: `${what} failed: ${(e as Error).message}` }),
      );
      if (v.source_id) void this.queue.kick(v.source_id); // the source is no longer busy with it
      return;
    }
    await this.s.store.tx(async (tx) => {
      const cur = await tx.volumes.getAny(id);
      if (cur && (cur.state === 'initializing' || cur.state === 'uninitialized')) {
        await tx.volumes.update(id, { state: cur.instance_id ? 'idle' : 'available' });
      }
      // the last copy done frees its source in the same commit (a clone asked for right after finds it free)
      const src = v.source_id ? await tx.volumes.getAny(v.source_id) : undefined;
      if (src?.state === 'busy' && this.images.sizeMb(src.id) === src.size_mb) {
        const pending = (await tx.volumes.all()).some(
          (c) => c.source_id === src.id && c.id !== id && (c.state === 'initializing' || c.state === 'uninitialized'),
        );
        if (!pending) await tx.volumes.update(src.id, { state: src.instance_id ? 'idle' : 'available' });
      }
    });
    if (v.source_id) void this.queue.kick(v.source_id);
  }

  /**
   * A busy volume: a source of clones being copied (it waits for them), or a
   * resize asked for (its image and file system brought to `size_mb`).
   * Once neither is pending it is free again: idle when attached, else
   * available.
   */
  private async busy(v: VolumeRec): Promise<void> {
    const copies = (await this.s.store.read((tx) => tx.volumes.all())).some(
      (c) => c.source_id === v.id && (c.state === 'initializing' || c.state === 'uninitialized'),
    );
    if (copies) return; // the clone's end kicks this volume again
    const size = this.images.sizeMb(v.id);
    let message: string | null = null;
    if (size !== undefined && size !== v.size_mb) {
      try {
        await this.images.resize(v.id, v.size_mb);
        this.log.info({ id: v.id, from: size, to: v.size_mb }, 'volume resized');
      } catch (e) {
        // the image keeps its size: the record says so, and why
        message = `resizing to ${v.size_mb} MB failed: ${(e as Error).message}`;
        this.log.warn({ id: v.id, err: e }, 'volume resize failed');
      }
    }
    await this.s.store.tx(async (tx) => {
      const cur = await tx.volumes.getAny(v.id);
      if (cur?.state !== 'busy') return;
      await tx.volumes.update(v.id, {
        state: cur.instance_id ? 'idle' : 'available',
        ...(message ? { message, size_mb: size ?? cur.size_mb } : {}),
      });
    });
    this.measured.delete(v.id);
  }
}
