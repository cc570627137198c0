import type { Target } from '../domain/refs.js';
import { refTarget } from '../domain/refs.js';
import { err } from '../errors.js';
import type { InstanceRec, Tx, UserRec, VolumeRec, VolumeState } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { checkMountPath } from '../domain/mount-path.js';
import { findInstance, findVolume } from './lookup.js';
import { effectiveQuotas } from './users.js';
import { clone, cloneInTx, insertVolume, makeTemplate, updateVolume, type CloneIn } from './volume-features.js';
import type { UpdateIn } from '../domain/updates.js';

export { findVolume };

export { checkMountPath };

export interface CreateVolumeIn {
  name?: string;
  size_mb?: number;
  /** a template volume to copy (the newer API) */
  template?: { uuid?: string; name?: string };
  tags?: string[];
  quota_policy?: string;
}

export interface AttachIn {
  attach_to: { uuid?: string; name?: string };
  at: string;
  readonly?: boolean;
}

/** What an attach request says on its own: checked before any entry runs. */
export function checkAttach(p: AttachIn): void {
  refTarget(p.attach_to, 'attach_to');
  checkMountPath(p.at);
}

/** Persistent volumes: records here, image files by the volumes reconciler. */
export class VolumeService {
  constructor(private readonly deps: ServiceBase) {}

  async createInTx(
    tx: Tx,
    user: UserRec,
    p: { name?: string; size_mb: number },
    persistent: boolean,
    /** the host of its file (undefined: placed now; null: placed with the instance it is made for) */
    hostId?: string | null,
  ): Promise<VolumeRec> {
    const { limits } = effectiveQuotas(this.deps.config, user);
    if (p.size_mb < limits.min_volume_mb || p.size_mb > limits.max_volume_mb) {
      throw err(
        'UH_LIMIT',
        `size_mb ${p.size_mb} is outside the account limits [${limits.min_volume_mb}, ${limits.max_volume_mb}]`,
      );
    }
    return insertVolume(this.deps, tx, user, { name: p.name, size_mb: p.size_mb, persistent, host_id: hostId });
  }

  async resolveInTx(tx: Tx, user: UserRec, t: { uuid?: string; name?: string }): Promise<VolumeRec> {
    if (t.uuid !== undefined && t.name !== undefined)
      throw err('UH_NOT_BOTH', "volume: give either 'uuid' or 'name', not both");
    if (t.uuid === undefined && t.name === undefined)
      throw err('UH_MISSING_ID', "volume: 'uuid', 'name' or 'size_mb' is required");
    return findVolume(tx, user, t);
  }

  /**
   * Attaches inside `tx`. The volume must be `available`, or still being
   * made (`initializing`: its agent formats or copies it, on another host
   * maybe; the boot waits for it, and it turns `idle` when made). The
   * instance must be stopped (or being created) and have no volume yet.
   */
  async attachInTx(
    tx: Tx,
    v: VolumeRec,
    inst: InstanceRec,
    at: string,
    readonly: boolean,
    creating = false,
  ): Promise<void> {
    checkMountPath(at);
    const making = v.state === 'initializing' || v.state === 'uninitialized';
    if (v.state !== 'available' && !making)
      throw err('UH_WRONG_STATE', `volume '${v.name}' is ${v.state}, not available`);
    if (v.instance_id !== null) throw err('UH_ATTACHED', `volume '${v.name}' is already attached`);
    if (inst.state !== 'stopped' && !creating) {
      throw err('UH_WRONG_STATE', `instance '${inst.name}' is ${inst.state}; volumes attach only to stopped instances`);
    }
    if ((await tx.volumes.forInstance(inst.id)).length > 0)
      throw err('UH_ATTACHED', `instance '${inst.name}' already has a volume`);
    const state: VolumeState = v.state === 'available' ? 'idle' : v.state;
    // the volume's file is on one host: the (stopped) instance will start there (docs/hosts.md)
    if (v.host_id && inst.host_id !== v.host_id && !creating)
      await tx.instances.updateSpec(inst.id, { host_id: v.host_id });
    await tx.volumes.update(v.id, { instance_id: inst.id, at, readonly, state, host_id: v.host_id ?? inst.host_id });
  }

  /** POST /v1/volumes: empty (`size_mb`), or a copy of a template (`template`, the newer API). */
  async create(user: UserRec, p: CreateVolumeIn) {
    const v = await this.deps.store.tx(async (tx) => {
      if (p.template === undefined) {
        if (p.size_mb === undefined) throw err('UH_INVALID', "parameter 'size_mb' is required (or 'template')");
        const made = await this.createInTx(tx, user, { name: p.name, size_mb: p.size_mb }, true);
        if (p.tags?.length) await tx.volumes.update(made.id, { tags: p.tags });
        return made;
      }
      const source = await findVolume(tx, user, refTarget(p.template, 'template'));
      if (source.state !== 'template') throw err('UH_NOT_FOUND', `No template volume '${source.name}'`);
      if (p.size_mb !== undefined && p.size_mb !== source.size_mb)
        throw err('UH_INVALID', `a volume from template '${source.name}' has its size, ${source.size_mb} MB`);
      return cloneInTx(this.deps, tx, user, source, { vol_name: p.name, tags: p.tags, quota_policy: p.quota_policy });
    });
    return { uuid: v.id, name: v.name, state: v.state };
  }

  view(v: VolumeRec, details: boolean, all: boolean): Record<string, unknown> {
    const out: Record<string, unknown> = { uuid: v.id, name: v.name, state: v.state };
    if (!details) return out;
    out.size_mb = v.size_mb;
    if (!all) out.attached_to = v.instance_id ? [{ uuid: v.instance_id }] : [];
    out.persistent = v.persistent;
    out.created_at = v.created_at;
    out.quota_policy = 'static';
    if (v.tags.length > 0) out.tags = v.tags;
    if (v.delete_lock) out.delete_lock = true;
    if (v.used_mb !== null) out.free_mb = Math.max(0, v.size_mb - v.used_mb);
    out.filesystem = 'ext4';
    if (v.state === 'error' && v.message) out.message = v.message;
    return out;
  }

  /** `listed`: the volume is one of a list of all volumes (no `attached_to`). */
  async get(user: UserRec, t: Target, details: boolean, listed = false) {
    return this.deps.store.read(async (tx) => this.view(await findVolume(tx, user, t), details, listed));
  }

  async attach(user: UserRec, t: Target, p: AttachIn) {
    return this.deps.store.tx(async (tx) => {
      const v = await findVolume(tx, user, t);
      const inst = await findInstance(tx, user, refTarget(p.attach_to, 'attach_to'));
      await this.attachInTx(tx, v, inst, p.at, p.readonly ?? false);
      return { uuid: v.id, name: v.name };
    });
  }

  async detach(user: UserRec, t: Target) {
    return this.deps.store.tx(async (tx) => {
      const v = await findVolume(tx, user, t);
      if (!v.instance_id) throw err('UH_NOT_ATTACHED', `volume '${v.name}' is not attached`);
      const inst = await tx.instances.get(user.id, v.instance_id);
      if (inst && inst.state !== 'stopped')
        throw err('UH_WRONG_STATE', `instance '${inst.name}' is ${inst.state}, not stopped`);
      await this.detachInTx(tx, v);
      return { uuid: v.id, name: v.name };
    });
  }

  /** Detaching makes a volume created with an instance persistent. */
  private async detachInTx(tx: Tx, v: VolumeRec, busy?: 'mounted'): Promise<void> {
    const free: VolumeState = v.state === 'idle' || v.state === 'mounted' ? 'available' : v.state;
    const state = busy && free === 'available' ? busy : free;
    await tx.volumes.update(v.id, { instance_id: null, at: null, readonly: false, state, persistent: true });
  }

  async delete(user: UserRec, t: Target) {
    return this.deps.store.tx(async (tx) => {
      const v = await findVolume(tx, user, t);
      if (v.instance_id) throw err('UH_ATTACHED', `volume '${v.name}' is still attached to an instance`);
      if (v.delete_lock)
        throw err('UH_NOT_ALLOWED', `volume '${v.name}' has delete_lock set; unset it first (PATCH, prop delete_lock)`);
      if (v.state === 'busy')
        throw err('UH_WRONG_STATE', `volume '${v.name}' is busy (a resize or a copy); try again shortly`);
      await tx.volumes.delete(v.id);
      return { uuid: v.id, name: v.name };
    });
  }

  /** PATCH: one property of a volume, or of a template (`templates`; src/services/volume-features.ts). */
  update(user: UserRec, t: Target, u: UpdateIn, templates = false) {
    return updateVolume(this.deps, user, t, u, templates);
  }

  /** POST clone: a new volume copying this one's image. */
  clone(user: UserRec, t: Target, p: CloneIn) {
    return clone(this.deps, user, t, p);
  }

  /** POST templates: the volume becomes a template. */
  makeTemplate(user: UserRec, t: Target) {
    return makeTemplate(this.deps, user, t);
  }

  /** GET templates: a template's status (a volume that is not one is not found). */
  async getTemplate(user: UserRec, t: Target, details: boolean) {
    return this.deps.store.read(async (tx) => {
      const v = await findVolume(tx, user, t);
      if (v.state !== 'template') throw err('UH_NOT_FOUND', `No template volume '${v.name}'`);
      return this.view(v, details, false);
    });
  }

  async list(user: UserRec, f: { persistent?: boolean; state?: VolumeState; templates?: boolean }) {
    const where: Partial<VolumeRec> = {};
    if (f.persistent !== undefined) where.persistent = f.persistent;
    if (f.state !== undefined) where.state = f.state;
    return this.deps.store.read(async (tx) =>
      (await tx.volumes.list(user.id, where))
        // templates are listed by /v1/volumes/templates
        .filter((v) => (f.templates ? v.state === 'template' : v.state !== 'template' || f.state === 'template'))
        .map((v) => ({ uuid: v.id, name: v.name })),
    );
  }

  /** Deleting an instance detaches persistent volumes and deletes the others. */
  async onInstanceDeletedInTx(tx: Tx, _user: UserRec, inst: InstanceRec): Promise<void> {
    for (const v of await tx.volumes.forInstance(inst.id)) {
      if (!v.persistent) await tx.volumes.delete(v.id);
      else if (inst.state === 'stopped' || inst.state === 'standby') await this.detachInTx(tx, v);
      // Its VM may still run: detached but `mounted` (nobody can attach it) until the machine
      // controller has killed the VM; else another boot could e2fsck a live file system.
      else await this.detachInTx(tx, v, 'mounted');
    }
  }
}
