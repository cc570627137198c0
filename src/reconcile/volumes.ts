import type { Controller, ControllerDeps } from './deps.js';
import type { VolumeDriver } from '../volumes/driver.js';
import { follow, RetryingQueue } from './engine.js';

/**
 * Makes volume images match the store through the volume driver: formats
 * new volumes (initializing → available, or idle when attached), removes the
 * images of deleted volumes, and marks a volume whose image went missing as
 * `error` with a message.
 */
export class VolumeController implements Controller {
  private readonly queue: RetryingQueue;
  private off: (() => void) | null = null;

  constructor(
    private readonly s: ControllerDeps,
    private readonly log: { warn(o: object, m: string): void; error(o: object, m: string): void },
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
    const v = await this.s.store.read((tx) => tx.volumes.getAny(id));
    if (!v) return this.images.remove(id);
    if (v.state === 'initializing' || v.state === 'uninitialized') {
      try {
        await this.images.format(id, v.size_mb);
      } catch (e) {
        await this.s.store.tx((tx) =>
          tx.volumes.update(id, { state: 'error', message: `formatting failed: ${(e as Error).message}` }),
        );
        return;
      }
      await this.s.store.tx(async (tx) => {
        const cur = await tx.volumes.getAny(id);
        if (cur && (cur.state === 'initializing' || cur.state === 'uninitialized')) {
          await tx.volumes.update(id, { state: cur.instance_id ? 'idle' : 'available' });
        }
      });
      return;
    }
    if (v.state !== 'error' && !this.images.exists(id)) {
      this.log.warn({ id }, 'volume image file is missing');
      await this.s.store.tx((tx) =>
        tx.volumes.update(id, { state: 'error', message: `the image file ${this.images.path(id)} is missing` }),
      );
    }
  }
}
