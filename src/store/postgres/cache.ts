import type { FeedEvent, InstanceRec, Tx, VolumeRec } from '../types.js';

const MAX = 20_000;

function freeze<T extends object>(rec: T): T {
  for (const v of Object.values(rec)) if (v && typeof v === 'object') Object.freeze(v);
  return Object.freeze(rec);
}

/**
 * What the read path asks most (an instance by id or by name, its volumes),
 * kept in this process and dropped by the change feed: an entry goes when
 * its instance changes (any process's commit, announced within milliseconds,
 * and before the feed's other watchers hear of it), every entry on a resync
 * or while the feed cannot be read. A read that raced a change does not
 * store its (possibly older) answer. Like SQLite's read path: a commit of
 * this process is visible to its reads as soon as `tx` resolves.
 */
export class ReadCache {
  private readonly byId = new Map<string, InstanceRec>();
  private readonly idByName = new Map<string, string>();
  private readonly volumes = new Map<string, VolumeRec[]>();
  /** bumped by every drop: an answer read across one is not kept */
  private gen = 0;
  private on = true;

  /** The feed's first watcher: drops what a committed change may have made stale. */
  onFeed(e: FeedEvent): void {
    this.gen++;
    if (e.type === 'resync') return this.clear();
    if (e.kind === 'instance') {
      const rec = this.byId.get(e.id);
      this.byId.delete(e.id);
      if (rec) this.idByName.delete(`${rec.user_id}\0${rec.name}`);
      this.volumes.delete(e.id);
    } else if (e.kind === 'volume') this.volumes.clear();
  }

  /** Off while the feed cannot be read (changes may go unseen), on again once it reads. */
  enable(on: boolean): void {
    this.gen++;
    this.on = on;
    if (!on) this.clear();
  }

  private clear(): void {
    this.byId.clear();
    this.idByName.clear();
    this.volumes.clear();
  }

  private keep(rec: InstanceRec | undefined, gen: number): InstanceRec | undefined {
    if (!rec || !this.on || gen !== this.gen) return rec;
    if (this.byId.size >= MAX) this.clear();
    freeze(rec);
    this.byId.set(rec.id, rec);
    this.idByName.set(`${rec.user_id}\0${rec.name}`, rec.id);
    return rec;
  }

  /** `tx` (the pool's read Tx) with the cached lookups in front. */
  wrap(tx: Tx): Tx {
    const byId = async (id: string): Promise<InstanceRec | undefined> => {
      const hit = this.byId.get(id);
      if (hit) return hit;
      const gen = this.gen;
      return this.keep(await tx.instances.getAny(id), gen);
    };
    return {
      ...tx,
      instances: {
        ...tx.instances,
        getAny: byId,
        get: async (userId, id) => {
          const rec = await byId(id);
          return rec?.user_id === userId ? rec : undefined;
        },
        getByName: async (userId, name) => {
          const id = this.idByName.get(`${userId}\0${name}`);
          const hit = id ? this.byId.get(id) : undefined;
          if (hit) return hit;
          const gen = this.gen;
          return this.keep(await tx.instances.getByName(userId, name), gen);
        },
      },
      volumes: {
        ...tx.volumes,
        forInstance: async (instanceId) => {
          const hit = this.volumes.get(instanceId);
          if (hit) return hit;
          const gen = this.gen;
          const list = await tx.volumes.forInstance(instanceId);
          if (this.on && gen === this.gen) this.volumes.set(instanceId, freeze(list.map(freeze)));
          return list;
        },
      },
    };
  }
}
