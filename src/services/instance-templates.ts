import type { Target } from '../domain/refs.js';
import { fire } from '../domain/instance-states.js';
import type { UpdateIn } from '../domain/updates.js';
import { unsupported } from '../domain/updates.js';
import { err } from '../errors.js';
import type { InstanceRec, Store, Tx, UserRec } from '../store/types.js';
import { findInstance } from './lookup.js';

/**
 * Instance templates (docs/snapshots.md, "Templates"): an instance made a
 * template keeps its memory in a snapshot and never runs again; instances
 * created with `template` start from that memory (a restore, not a boot),
 * each with its own name, private IP and MAC.
 */

/**
 * A user's template (or checkpoint, `kind`) by target: UH_NOT_FOUND when
 * there is none (an instance of another kind included).
 */
export async function findTemplate(
  tx: Tx,
  user: UserRec,
  t: Target,
  kind: 'template' | 'checkpoint' = 'template',
): Promise<InstanceRec> {
  const i = await findInstance(tx, user, t).catch(() => undefined);
  if (!i || i.state !== kind)
    throw err(
      'UH_NOT_FOUND',
      t.uuid !== undefined ? `No ${kind} instance with UUID '${t.uuid}'` : `No ${kind} instance with name '${t.name}'`,
    );
  return i;
}

export const findCheckpoint = (tx: Tx, user: UserRec, t: Target) => findTemplate(tx, user, t, 'checkpoint');

/** Why `inst` cannot become a template, or null. */
async function cannotBeTemplate(tx: Tx, inst: InstanceRec): Promise<string | null> {
  const volumes = await tx.volumes.forInstance(inst.id);
  if (volumes.length > 0)
    return `it has volume '${volumes[0]!.name}' attached: a volume belongs to one instance, so the template's clones could not have it (detach it first)`;
  if (inst.autoscale_group_id) return 'it is an autoscale clone: the autoscaler removes it when it scales in';
  if (inst.service_group_id && (await tx.autoscale.get(inst.service_group_id))?.master_id === inst.id)
    return "it is the master of its service group's autoscale (or scale-to-zero) configuration";
  return null;
}

/**
 * POST /v1/instances/templates: makes an instance a template. A running
 * instance is paused, its memory written to a snapshot and its VM ended
 * (`stopping`, then `template`); a standby or suspended instance that has
 * its snapshot becomes one at once. Other states are refused, as are
 * instances with volumes and autoscale masters and clones. Already a
 * template: answered as it is.
 */
export async function makeTemplate(deps: { store: Store }, user: UserRec, t: Target) {
  return deps.store.tx(async (tx) => {
    const inst = await findInstance(tx, user, t);
    const answer = (state: string) => ({ uuid: inst.id, name: inst.name, state, previous_state: inst.state });
    if (inst.state === 'template') return answer('template');
    if (inst.state === 'checkpoint')
      throw err(
        'UH_WRONG_STATE',
        `instance '${inst.name}' is a checkpoint: create an instance from it (checkpoint), then make that a template`,
      );
    const why = await cannotBeTemplate(tx, inst);
    if (why) throw err('UH_NOT_ALLOWED', `instance '${inst.name}' cannot become a template: ${why}`);
    const ownSnapshot = inst.state === 'standby' && inst.snapshot !== null && !inst.snapshot.source;
    if (inst.state !== 'running' && !ownSnapshot)
      throw err(
        'UH_WRONG_STATE',
        `instance '${inst.name}' is ${inst.state}: a template is made from a running instance (its memory is what the template's instances start from), or a suspended one`,
      );
    await tx.instances.updateSpec(inst.id, { desired: 'stopped' });
    if (ownSnapshot) {
      // its snapshot becomes the template's (written with the state change, by the state table)
      const snapshot = { ...inst.snapshot!, reason: 'template' as const };
      return answer((await fire(tx, inst, 'templated', { snapshot }, { resetRestarts: true }))?.state ?? inst.state);
    }
    const stop = { force: false, drain_until: null, by: 'user' as const, snapshot: 'template' as const };
    const after = await fire(tx, inst, 'stop', { stop_request: stop }, { resetRestarts: true });
    return answer(after?.state ?? inst.state);
  });
}

/** What a template's PATCH may change (the SDK's MutableTemplateInstanceProperty); `autokill` is refused with why. */
const TEMPLATE_PROPS = new Set(['tags', 'delete_lock', 'annotations']);

/** Checks that `u` may change template or checkpoint `inst` through PATCH (of its kind, or of instances). */
export function checkTemplateUpdate(inst: InstanceRec, u: UpdateIn): void {
  if (u.prop === 'autokill') unsupported('autokill', `${inst.state}s are not deleted after a time unused`);
  if (!TEMPLATE_PROPS.has(u.prop))
    throw err(
      'UH_WRONG_STATE',
      `instance '${inst.name}' is a ${inst.state}: only tags, annotations and delete_lock change (its memory was booted with the rest)`,
    );
}
