import { randomUUID } from 'node:crypto';
import type { Target } from '../domain/refs.js';
import { volumeDefaultName } from '../domain/names.js';
import { applyList, onlyOps, setBool, setInt, unsupported, type UpdateIn } from '../domain/updates.js';
import { err } from '../errors.js';
import type { Tx, UserRec, VolumeRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { findVolume } from './lookup.js';
import { assertQuota, effectiveQuotas } from './users.js';
import { placeInTx } from './capacity.js';

/**
 * The newer API's volume features (docs/api.md, "Volumes"): updates (size,
 * tags, the delete lock), clones and templates. The image work (resize2fs, a
 * copy) is the volume controller's (src/reconcile/volumes.ts); a volume it
 * works on is `busy` meanwhile, so nothing boots with it.
 */

/** An instance using the volume is running (or on its way): its image must not change under it. */
async function assertNotInUse(tx: Tx, user: UserRec, v: VolumeRec, what: string): Promise<void> {
  if (v.state === 'busy' || v.state === 'initializing' || v.state === 'uninitialized')
    throw err('UH_WRONG_STATE', `volume '${v.name}' is ${v.state}; ${what} waits until it is available`);
  if (v.state === 'mounted')
    throw err('UH_WRONG_STATE', `volume '${v.name}' is mounted by a running VM; ${what} needs it unmounted`);
  if (v.state === 'error')
    throw err('UH_WRONG_STATE', `volume '${v.name}' is in error: ${v.message ?? 'see the operator'}`);
  if (!v.instance_id) return;
  const inst = await tx.instances.get(user.id, v.instance_id);
  if (inst && inst.state !== 'stopped')
    throw err(
      'UH_WRONG_STATE',
      `volume '${v.name}' is attached to '${inst.name}', which is ${inst.state}; stop it first`,
    );
}

/** `PATCH /v1/volumes`: `size_mb` (grow or shrink, offline), `tags`, `delete_lock`, `quota_policy`. */
export async function updateVolume(
  deps: ServiceBase,
  user: UserRec,
  t: Target,
  u: UpdateIn,
  templates = false,
): Promise<Record<string, unknown>> {
  return deps.store.tx(async (tx) => {
    const v = await findVolume(tx, user, t);
    if ((v.state === 'template') !== templates)
      throw err('UH_NOT_FOUND', templates ? `No template volume '${v.name}'` : `volume '${v.name}' is a template`);
    const said = await apply(deps, tx, user, v, u);
    return { uuid: v.id, name: v.name, ...(u.id !== undefined ? { id: u.id } : {}), message: said };
  });
}

async function apply(deps: ServiceBase, tx: Tx, user: UserRec, v: VolumeRec, u: UpdateIn): Promise<string> {
  switch (u.prop) {
    case 'size_mb': {
      if (v.state === 'template') throw err('UH_WRONG_STATE', `volume '${v.name}' is a template: it does not change`);
      const { limits } = effectiveQuotas(deps.config, user);
      const mb = setInt(u, limits.min_volume_mb, limits.max_volume_mb);
      if (mb === v.size_mb) return `size_mb is ${mb}`;
      await assertNotInUse(tx, user, v, 'a resize');
      if (mb < v.size_mb) {
        if (v.used_mb === null)
          throw err('UH_WRONG_STATE', `volume '${v.name}': its use is not measured yet; try the shrink again shortly`);
        // ext4 keeps a little room for its own metadata when it shrinks
        const floor = v.used_mb + Math.max(8, Math.ceil(v.used_mb * 0.1));
        if (mb < floor)
          throw err(
            'UH_INVALID',
            `volume '${v.name}' cannot shrink to ${mb} MB: its file system uses ${v.used_mb} MB (at least ${floor} MB are needed)`,
          );
      } else await assertQuota(tx, deps.config, user, { total_volume_mb: mb - v.size_mb });
      await tx.volumes.update(v.id, { size_mb: mb, state: 'busy', message: null });
      return `size_mb set to ${mb}: the file system is resized now (the volume is busy until it is done)`;
    }
    case 'tags':
      await tx.volumes.update(v.id, { tags: applyList(v.tags, u) });
      return 'tags updated';
    case 'delete_lock': {
      const on = setBool(u);
      await tx.volumes.update(v.id, { delete_lock: on });
      return on ? 'delete_lock set: deletes are refused until it is unset' : 'delete_lock unset';
    }
    case 'quota_policy':
      onlyOps(u, ['set']);
      if (u.value !== 'static') unsupported('quota_policy', "volumes have a fixed size ('static')");
      return "quota_policy is 'static'";
    default:
      throw err('UH_INVALID', `update: unknown property '${u.prop}'`);
  }
}

export interface CloneIn {
  vol_name?: string;
  tags?: string[];
  quota_policy?: string;
}

/**
 * Admits a new volume (quota, a name not taken) and inserts it,
 * `initializing`: the volume controller then formats it, or copies its
 * source. Creates and clones alike.
 */
export async function insertVolume(
  deps: ServiceBase,
  tx: Tx,
  user: UserRec,
  o: {
    name?: string;
    size_mb: number;
    persistent: boolean;
    tags?: string[];
    used_mb?: number | null;
    source_id?: string | null;
    /** the host of its file; undefined: placed here (null: the caller places it with its instance) */
    host_id?: string | null;
  },
): Promise<VolumeRec> {
  await assertQuota(tx, deps.config, user, { volumes: 1, total_volume_mb: o.size_mb });
  // a file on one host: a copy where its source is, a new one where placement says (docs/hosts.md)
  const hostId =
    o.host_id !== undefined
      ? o.host_id
      : (await placeInTx(tx, deps.config.capacity, { count: 1, memoryMb: 0, live: false }))[0]!;
  const name = o.name ?? volumeDefaultName();
  if (await tx.volumes.getByName(user.id, name)) throw err('UH_EXISTS', `a volume named '${name}' already exists`);
  const v: VolumeRec = {
    id: randomUUID(),
    user_id: user.id,
    name,
    created_at: new Date(deps.clock.now()).toISOString(),
    size_mb: o.size_mb,
    state: 'initializing',
    persistent: o.persistent,
    instance_id: null,
    at: null,
    readonly: false,
    message: null,
    tags: o.tags ?? [],
    delete_lock: false,
    used_mb: o.used_mb ?? null,
    source_id: o.source_id ?? null,
    host_id: hostId,
  };
  await tx.volumes.insert(v);
  return v;
}

/**
 * A new volume whose image is a copy of `source`'s (a volume or a template):
 * the controller copies the file (copy-on-write where the file system can,
 * docs/volumes.md). A source that is not a template is `busy` meanwhile.
 */
export async function cloneInTx(
  deps: ServiceBase,
  tx: Tx,
  user: UserRec,
  source: VolumeRec,
  p: CloneIn,
  persistent = true,
): Promise<VolumeRec> {
  if (p.quota_policy !== undefined && p.quota_policy !== 'static')
    unsupported('quota_policy', "volumes have a fixed size ('static')");
  // a source busy only with other clones is read by one more copy at once (a resize waits for it to be free)
  const copying =
    source.state === 'busy' &&
    (await tx.volumes.all()).some(
      (c) => c.source_id === source.id && (c.state === 'initializing' || c.state === 'uninitialized'),
    );
  if (source.state !== 'template' && !copying) await assertNotInUse(tx, user, source, 'a clone');
  const v = await insertVolume(deps, tx, user, {
    name: p.vol_name,
    size_mb: source.size_mb,
    persistent,
    tags: p.tags,
    used_mb: source.used_mb,
    source_id: source.id,
    host_id: source.host_id,
  });
  if (source.state !== 'template') await tx.volumes.update(source.id, { state: 'busy' });
  return v;
}

export async function clone(deps: ServiceBase, user: UserRec, t: Target, p: CloneIn) {
  return deps.store.tx(async (tx) => {
    const v = await cloneInTx(deps, tx, user, await findVolume(tx, user, t), p);
    return { uuid: v.id, name: v.name, state: v.state };
  });
}

/** `POST /v1/volumes/templates`: the volume becomes a template (unattached and available only). */
export async function makeTemplate(deps: ServiceBase, user: UserRec, t: Target) {
  return deps.store.tx(async (tx) => {
    const v = await findVolume(tx, user, t);
    if (v.state === 'template') return { uuid: v.id, name: v.name, state: v.state };
    if (v.instance_id) throw err('UH_ATTACHED', `volume '${v.name}' is attached; detach it to make it a template`);
    if (v.state !== 'available')
      throw err('UH_WRONG_STATE', `volume '${v.name}' is ${v.state}; only an available volume becomes a template`);
    await tx.volumes.update(v.id, { state: 'template', persistent: true });
    return { uuid: v.id, name: v.name, state: 'template' };
  });
}
