import type { Target } from '../domain/refs.js';
import { envValueProblem, wordProblem } from '../domain/cmdline.js';
import {
  applyList,
  applyMap,
  checkHostname,
  onlyOps,
  setBool,
  setInt,
  unsupported,
  type UpdateIn,
} from '../domain/updates.js';
import { err } from '../errors.js';
import type { InstanceRec, SpecPatch, Tx, UserRec } from '../store/types.js';
import { scaleToZeroOf, splitArgs, type InstanceDeps, type ScaleToZeroIn } from './instances-create.js';
import { findInstance } from './lookup.js';
import { checkTemplateUpdate } from './instance-templates.js';
import { FROZEN } from '../domain/instance-states.js';
import { effectiveQuotas } from './users.js';

/** Properties that change what boots: only while the instance is stopped (they apply at its next start). */
const NEEDS_STOP = new Set(['image', 'args', 'env', 'memory_mb', 'vcpus']);

/** Properties of the SDK this platform does not offer, and why (docs/api.md, "Updates"). */
const UNSUPPORTED: Record<string, string> = {
  schedules: 'no scheduler runs actions on instances',
  autokill: 'instances are not killed after a time or a number of requests',
  roms: 'instances boot a kernel and an initrd only',
  plugins: 'there are no instance plugins',
  dependencies: 'instances start independently',
  sched_priority: 'every VM has the same scheduling priority',
};

/**
 * `PATCH /v1/instances`: one property of one instance. What boots (image,
 * args, env, memory, vCPUs) changes only while it is stopped; labels, notes,
 * the delete lock, the hostname (at its next boot) and scale-to-zero change
 * in any state. Returns the entry of the answer, its message saying what
 * changed and when it applies.
 */
export async function updateInstance(
  deps: InstanceDeps,
  user: UserRec,
  t: Target,
  u: UpdateIn,
  find: (tx: Tx, user: UserRec, t: Target) => Promise<InstanceRec> = findInstance,
): Promise<Record<string, unknown>> {
  return deps.store.tx(async (tx) => {
    const inst = await find(tx, user, t);
    const said = await applyUpdate(deps, tx, user, inst, u);
    return { uuid: inst.id, name: inst.name, ...(u.id !== undefined ? { id: u.id } : {}), message: said };
  });
}

async function applyUpdate(deps: InstanceDeps, tx: Tx, user: UserRec, inst: InstanceRec, u: UpdateIn): Promise<string> {
  if (FROZEN.has(inst.state)) checkTemplateUpdate(inst, u);
  if (u.prop in UNSUPPORTED) unsupported(u.prop, UNSUPPORTED[u.prop]!);
  if (NEEDS_STOP.has(u.prop) && inst.state !== 'stopped')
    throw err(
      'UH_WRONG_STATE',
      `instance '${inst.name}' is ${inst.state}: '${u.prop}' changes what boots, so it changes only while the instance is stopped (stop it, update, start it)`,
    );
  const spec = (patch: SpecPatch) => tx.instances.updateSpec(inst.id, patch);
  switch (u.prop) {
    case 'image': {
      onlyOps(u, ['set']);
      if (typeof u.value !== 'string')
        unsupported('image', 'the value is an image reference; pulling by URL with credentials is not offered here');
      const img = await deps.images.resolve(tx, user, u.value);
      if (img.minMemoryMb > inst.memory_mb)
        throw err(
          'UH_MEMORY_TOO_SMALL',
          `image '${u.value}' needs at least ${img.minMemoryMb} MB; the instance has ${inst.memory_mb} MB (update memory_mb first)`,
        );
      await spec({ image: img.digest, image_ref: u.value });
      return `image set to ${u.value} (${img.digest}); it boots at the next start`;
    }
    case 'args': {
      const value = u.op === 'set' && typeof u.value === 'string' ? splitArgs(u.value)! : u.value;
      const args = applyList(inst.args, { ...u, value });
      for (const a of args) {
        const why = wordProblem(a);
        if (why) throw err('UH_INVALID', `update of 'args': '${a}' ${why}`);
      }
      await spec({ args });
      return `args are now ${JSON.stringify(args)}; they apply at the next start`;
    }
    case 'env': {
      const env = applyMap(inst.env, u);
      for (const [k, v] of Object.entries(env)) {
        const why = envValueProblem(v);
        if (why) throw err('UH_INVALID', `update of 'env': the value of ${k} ${why}`);
      }
      await spec({ env });
      return `env has ${Object.keys(env).length} variables; they apply at the next start`;
    }
    case 'memory_mb': {
      const { limits } = effectiveQuotas(deps.config, user);
      const mb = setInt(u, limits.min_memory_mb, limits.max_memory_mb);
      const img = await tx.images.get(inst.image);
      if (img && img.min_memory_mb > mb)
        throw err('UH_MEMORY_TOO_SMALL', `the instance's image needs at least ${img.min_memory_mb} MB`);
      await spec({ memory_mb: mb });
      return `memory_mb set to ${mb}; it applies at the next start`;
    }
    case 'vcpus':
      if (setInt(u, 1, 64) !== 1) unsupported('vcpus', 'every instance runs on one vCPU');
      return 'vcpus is 1';
    case 'tags':
      await spec({ tags: applyList(inst.tags, u) });
      return 'tags updated';
    case 'annotations':
      await spec({ annotations: applyMap(inst.annotations, u) });
      return 'annotations updated';
    case 'delete_lock': {
      const on = setBool(u);
      await spec({ delete_lock: on });
      return on ? 'delete_lock set: deletes are refused until it is unset' : 'delete_lock unset';
    }
    case 'hostname': {
      const hostname = checkHostname(u);
      await spec({ hostname });
      return hostname ? `hostname set to ${hostname}; the guest gets it at its next boot` : 'hostname unset';
    }
    case 'scale_to_zero':
      return updateScaleToZero(deps, tx, user, inst, u);
    default:
      throw err('UH_INVALID', `update: unknown property '${u.prop}'`);
  }
}

/** `scale_to_zero`: `set` the SDK's object (policy on/off, cooldown), `del` turns it off. */
async function updateScaleToZero(
  deps: InstanceDeps,
  tx: Tx,
  user: UserRec,
  inst: InstanceRec,
  u: UpdateIn,
): Promise<string> {
  onlyOps(u, ['set', 'del']);
  const o = u.op === 'del' ? { policy: 'off' as const } : (u.value as ScaleToZeroIn);
  if (!o || typeof o !== 'object') throw err('UH_INVALID', "update of 'scale_to_zero': the value must be an object");
  const on = scaleToZeroOf({ scale_to_zero: o });
  const g = inst.service_group_id ? await tx.groups.get(user.id, inst.service_group_id) : undefined;
  const conf = g ? await tx.autoscale.get(g.id) : undefined;
  const mine = conf?.master_id === inst.id && conf.min_size === 0;
  if (!on) {
    if (!mine) return 'scale-to-zero is off';
    await deps.autoscale.deleteInTx(tx, user, g!);
    await tx.instances.updateSpec(inst.id, {
      features: inst.features.filter((f) => f !== 'scale-to-zero' && f !== 'stateful'),
    });
    return 'scale-to-zero turned off';
  }
  if (!g || g.services.length === 0)
    throw err('UH_INVALID', `instance '${inst.name}': scale-to-zero needs a service group that publishes ports`);
  const cooldown = on.cooldownMs;
  // `stateful` given or not: the object says what it is from now on
  const features = [
    ...new Set([
      ...inst.features.filter((f) => f !== 'stateful'),
      'scale-to-zero',
      ...(on.stateful ? ['stateful'] : []),
    ]),
  ];
  const how = on.stateful ? ' (stateful: memory kept in standby)' : '';
  if (mine) {
    if (cooldown !== undefined) await tx.autoscale.update(g.id, { cooldown_time_ms: cooldown });
    await tx.instances.updateSpec(inst.id, { features });
    return `scale-to-zero is on${cooldown !== undefined ? `, cooldown ${cooldown} ms` : ''}${how}`;
  }
  if (conf) throw err('UH_AUTOSCALE_CONFIGURED', `service group '${g.name}' already has an autoscale configuration`);
  await deps.autoscale.configureScaleToZeroInTx(tx, user, g, inst, cooldown);
  await tx.instances.updateSpec(inst.id, { features });
  return `scale-to-zero turned on${how}`;
}
