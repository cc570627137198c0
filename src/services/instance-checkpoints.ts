import { randomUUID } from 'node:crypto';
import { NEVER_RUN, specDefaults } from '../domain/instance-states.js';
import { NAME_MAX, randomSuffix } from '../domain/names.js';
import { refTarget, type Ref, type Target } from '../domain/refs.js';
import { err } from '../errors.js';
import type { InstanceRec, Tx, UserRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { findCheckpoint } from './instance-templates.js';
import { findInstance } from './lookup.js';
import { assertQuota } from './users.js';

/**
 * Instance checkpoints (docs/snapshots.md, "Checkpoints"): the memory of a
 * running instance at one moment, kept as an object of its own (state
 * `checkpoint`) while the instance runs on. Instances created with
 * `checkpoint` start from it, as from a template. The host that runs the
 * instance takes it (src/reconcile/machine-snapshots.ts): the record is
 * `pending` until the file is written, and goes (with a notice on the
 * instance) if it cannot be.
 */

export interface CheckpointParams {
  from: Ref;
  name?: string;
  tags?: string[];
}

/** POST /v1/instances/checkpoints: one checkpoint of a running instance (asked for; the host writes it). */
export async function createCheckpoint(deps: ServiceBase, tx: Tx, user: UserRec, p: CheckpointParams) {
  const src = await findInstance(tx, user, refTarget(p.from, "parameter 'from'"));
  if (src.state !== 'running')
    throw err(
      'UH_WRONG_STATE',
      `instance '${src.name}' is ${src.state}: a checkpoint is taken of a running instance (its memory at that moment)`,
    );
  const volumes = await tx.volumes.forInstance(src.id);
  if (volumes.length > 0)
    throw err(
      'UH_NOT_ALLOWED',
      `instance '${src.name}' has volume '${volumes[0]!.name}' attached: a checkpoint holds memory only, and the volume's contents move on (instances started from it could not have them)`,
    );
  const name = p.name ?? `${src.name.slice(0, NAME_MAX - 11)}-ckpt-${randomSuffix(5)}`;
  if (await tx.instances.getByName(user.id, name)) throw err('UH_EXISTS', `an instance named '${name}' already exists`);
  await assertQuota(tx, deps.config, user, { instances: 1 });
  const now = new Date(deps.clock.now()).toISOString();
  const rec: InstanceRec = {
    id: randomUUID(),
    user_id: user.id,
    name,
    created_at: now,
    image: src.image,
    image_ref: src.image_ref,
    memory_mb: src.memory_mb,
    args: src.args,
    env: src.env,
    features: [],
    restart_policy: 'never',
    state: 'checkpoint',
    desired: 'stopped',
    ...NEVER_RUN,
    ...specDefaults(),
    tags: p.tags ?? [],
    hostname: src.hostname,
    service_group_id: null,
    // no address of its own: it never runs (an instance started from it gets one)
    private_ip: null,
    mac: null,
    nic_id: null,
    autoscale_group_id: null,
    // the host of the instance writes it, beside that instance's VM
    host_id: src.host_id,
    runtime: {},
    snapshot: {
      bytes: 0,
      created_at: now,
      reason: 'checkpoint',
      image: src.image,
      memory_mb: src.memory_mb,
      machine: '',
      vmm: '',
      taken_from: src.id,
      pending: true,
    },
  };
  await tx.instances.insert(rec);
  return { uuid: rec.id, name: rec.name, state: rec.state };
}

/** GET /v1/instances/checkpoints/history: the checkpoints taken of an instance (still kept), oldest first. */
export async function checkpointHistory(tx: Tx, user: UserRec, t: Target) {
  const inst = await findInstance(tx, user, t);
  const taken = (await tx.instances.list(user.id))
    .filter((i) => i.state === 'checkpoint' && i.snapshot?.taken_from === inst.id)
    .sort((a, b) => a.created_at.localeCompare(b.created_at));
  return {
    uuid: inst.id,
    name: inst.name,
    history: taken.map((c) => ({ uuid: c.id, name: c.name, created_at: c.snapshot?.created_at ?? c.created_at })),
  };
}

/** A checkpoint that instances can start from: written (not pending). */
export async function readyCheckpoint(tx: Tx, user: UserRec, t: Target): Promise<InstanceRec> {
  const c = await findCheckpoint(tx, user, t);
  if (c.snapshot?.pending)
    throw err(
      'UH_WRONG_STATE',
      `checkpoint '${c.name}' is still being taken: wait for it (timeout_s when creating it)`,
    );
  return c;
}
