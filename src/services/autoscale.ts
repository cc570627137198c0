import { randomUUID } from 'node:crypto';
import type { Target } from '../domain/refs.js';
import { fire, NEVER_RUN, nextState } from '../domain/instance-states.js';
import { allocateIp } from '../domain/ipam.js';
import { macFor } from '../network/address.js';
import { NAME_MAX, randomSuffix } from '../domain/names.js';
import { refTarget } from '../domain/refs.js';
import { checkPolicy, type PolicyIn } from '../domain/steps.js';
import { err } from '../errors.js';
import type { AutoscaleRec, InstanceRec, PolicyRec, ServiceGroupRec, Tx, UserRec } from '../store/types.js';
import type { InstanceLifecycle, ServiceBase } from './deps.js';
import type { GroupService } from './groups.js';
import { findGroup, findInstance } from './lookup.js';
import { assertQuota, effectiveQuotas } from './users.js';
import { ADMISSION, assertHostCapacity, placeInTx } from './capacity.js';

export interface AutoscaleIn {
  master: { uuid?: string; name?: string };
  min_size?: number;
  max_size?: number;
  warmup_time_ms?: number;
  cooldown_time_ms?: number;
  policies?: PolicyIn[];
}

export const AUTOSCALE_DEFAULTS = { min_size: 1, max_size: 4, warmup_time_ms: 1000, cooldown_time_ms: 1000 };

/** Checks policies for one configuration: each valid, no name twice. */
export function checkPolicies(policies: PolicyIn[]): PolicyRec[] {
  const names = new Set<string>();
  return policies.map((p) => {
    if (names.has(p.name)) throw err('UH_INVALID', `policy '${p.name}' is given twice`);
    names.add(p.name);
    return checkPolicy(p);
  });
}

/**
 * What a create request says on its own (sizes in order, valid policies), so
 * the route can refuse it with a 400 before any entry runs.
 */
export function checkAutoscaleParams(p: AutoscaleIn): void {
  const min = p.min_size ?? AUTOSCALE_DEFAULTS.min_size;
  const max = p.max_size ?? AUTOSCALE_DEFAULTS.max_size;
  if (min > max) throw err('UH_INVALID', `min_size (${min}) must not be larger than max_size (${max})`);
  refTarget(p.master, 'master');
  checkPolicies(p.policies ?? []);
}

/** The peers the autoscale rules call: instances through a narrow interface, as instances call this service. */
export type AutoscaleDeps = ServiceBase & { instances: InstanceLifecycle; groups: GroupService };

/** Autoscale configuration and policies of a service group. The autoscaler reconciler acts on them. */
export class AutoscaleService {
  constructor(private readonly deps: AutoscaleDeps) {}

  private checkSizes(user: UserRec, min: number, max: number): void {
    const { limits } = effectiveQuotas(this.deps.config, user);
    if (limits.min_autoscale_size === 1 && limits.max_autoscale_size === 1) {
      throw err('UH_AUTOSCALE_DISABLED', 'autoscale is not enabled for this account');
    }
    if (min > max) throw err('UH_INVALID', `min_size (${min}) must not be larger than max_size (${max})`);
    for (const [k, v] of [
      ['min_size', min],
      ['max_size', max],
    ] as const) {
      if (v < limits.min_autoscale_size || v > limits.max_autoscale_size) {
        throw err(
          'UH_AUTOSCALE_SIZE',
          `${k} ${v} is outside the account limits [${limits.min_autoscale_size}, ${limits.max_autoscale_size}]`,
        );
      }
    }
  }

  private async insertInTx(
    tx: Tx,
    user: UserRec,
    g: ServiceGroupRec,
    master: InstanceRec,
    c: Omit<AutoscaleRec, 'group_id' | 'user_id' | 'master_id' | 'enabled'>,
  ) {
    if (await tx.autoscale.get(g.id))
      throw err('UH_AUTOSCALE_CONFIGURED', `autoscale is already configured for service group '${g.name}'`);
    if (master.service_group_id !== g.id) {
      throw err('UH_INVALID', `master instance '${master.name}' is not attached to service group '${g.name}'`);
    }
    if (master.autoscale_group_id)
      throw err('UH_INVALID', `instance '${master.name}' was created by autoscale and cannot be a master`);
    if (await tx.autoscale.forMaster(master.id))
      throw err('UH_AUTOSCALE_CONFIGURED', `instance '${master.name}' is already a master`);
    this.checkSizes(user, c.min_size, c.max_size);
    await tx.autoscale.insert({ ...c, group_id: g.id, user_id: user.id, master_id: master.id, enabled: true });
  }

  async create(user: UserRec, t: Target, p: AutoscaleIn) {
    return this.deps.store.tx(async (tx) => {
      const g = await findGroup(tx, user, t);
      const master = await findInstance(tx, user, refTarget(p.master, 'master'));
      await this.insertInTx(tx, user, g, master, {
        min_size: p.min_size ?? AUTOSCALE_DEFAULTS.min_size,
        max_size: p.max_size ?? AUTOSCALE_DEFAULTS.max_size,
        warmup_time_ms: p.warmup_time_ms ?? AUTOSCALE_DEFAULTS.warmup_time_ms,
        cooldown_time_ms: p.cooldown_time_ms ?? AUTOSCALE_DEFAULTS.cooldown_time_ms,
        policies: checkPolicies(p.policies ?? []),
      });
      return { uuid: g.id, name: g.name };
    });
  }

  /**
   * Scale-to-zero asked for on instance create (`features: [scale-to-zero]`
   * or the SDK's `scale_to_zero`): min 0, max 1, the given cooldown, other
   * defaults.
   */
  async configureScaleToZeroInTx(
    tx: Tx,
    user: UserRec,
    g: ServiceGroupRec,
    master: InstanceRec,
    cooldownMs = AUTOSCALE_DEFAULTS.cooldown_time_ms,
  ): Promise<void> {
    await this.insertInTx(tx, user, g, master, {
      ...AUTOSCALE_DEFAULTS,
      min_size: 0,
      max_size: 1,
      cooldown_time_ms: cooldownMs,
      policies: [],
    });
  }

  async get(user: UserRec, t: Target) {
    return this.deps.store.read(async (tx) => {
      const g = await findGroup(tx, user, t);
      const c = await tx.autoscale.get(g.id);
      if (!c) return { status: 'unconfigured', uuid: g.id, name: g.name };
      const m = await tx.instances.get(user.id, c.master_id);
      return {
        uuid: g.id,
        name: g.name,
        enabled: c.enabled,
        min_size: c.min_size,
        max_size: c.max_size,
        warmup_time_ms: c.warmup_time_ms,
        cooldown_time_ms: c.cooldown_time_ms,
        master: { uuid: c.master_id, name: m?.name },
        policies: c.policies,
      };
    });
  }

  /**
   * Deletes the configuration. Instances created by autoscale drain for at
   * most one cooldown and are then deleted (delete-on-stop); the master is
   * started if it is stopped.
   */
  async delete(user: UserRec, t: Target) {
    return this.deps.store.tx(async (tx) => {
      const g = await findGroup(tx, user, t);
      const c = await tx.autoscale.get(g.id);
      if (!c) throw err('UH_AUTOSCALE_NOT_CONFIGURED', `autoscale is not configured for service group '${g.name}'`);
      await tx.autoscale.delete(g.id);
      for (const i of await tx.instances.inGroup(g.id)) {
        if (i.autoscale_group_id === g.id) await this.drainCloneInTx(tx, user, i, c.cooldown_time_ms);
      }
      const master = await tx.instances.get(user.id, c.master_id);
      if (master && (master.state === 'stopped' || master.state === 'standby'))
        await this.deps.instances.startInTx(tx, user, master, false);
      return { uuid: g.id, name: g.name };
    });
  }

  /**
   * Takes a clone out (scale-in, configuration deleted): it drains for at
   * most `drainMs` and is deleted once stopped (delete-on-stop); a stopped
   * one goes at once.
   */
  async drainCloneInTx(tx: Tx, user: UserRec, i: InstanceRec, drainMs: number): Promise<void> {
    // no VM to drain (clones never wait in standby: they have no scale-to-zero)
    if (i.state === 'stopped' || i.state === 'standby') return this.deps.instances.deleteInTx(tx, user, i);
    await tx.instances.updateSpec(i.id, {
      features: [...new Set([...i.features, 'delete-on-stop'])],
      desired: 'stopped',
    });
    // a drain already under way keeps its (earlier) end (the table has no row for it)
    await fire(tx, i, 'stop-drain', {
      stop_request: { force: false, drain_until: this.deps.clock.now() + drainMs, by: 'platform' },
    });
  }

  /**
   * Scale-to-zero: the idle master stops (the platform's stop, stop_reason 7
   * when the guest shuts down cleanly) into `standby`, where traffic wakes it
   * (src/reconcile/wake.ts). Its record, IP, volumes and tap stay.
   */
  async standbyInTx(tx: Tx, master: InstanceRec): Promise<void> {
    if (master.desired !== 'running' || !nextState(master.state, 'idle')) return;
    await tx.instances.updateSpec(master.id, { desired: 'stopped' });
    await fire(tx, master, 'idle', {
      stop_request: { force: false, drain_until: null, by: 'platform', standby: true },
    });
  }

  /**
   * Scale-out: one clone of the master in its group (same image digest,
   * args, env, memory, restart policy; no volumes), started at once and
   * marked with `autoscale_group_id`. Quotas and host capacity apply.
   */
  async cloneInTx(tx: Tx, user: UserRec, g: ServiceGroupRec, master: InstanceRec): Promise<InstanceRec> {
    await tx.lock(ADMISSION);
    await assertQuota(tx, this.deps.config, user, {
      instances: 1,
      live_instances: 1,
      live_memory_mb: master.memory_mb,
    });
    await assertHostCapacity(tx, this.deps.config.capacity, 1, master.memory_mb);
    let name = `${master.name.slice(0, NAME_MAX - 6)}-${randomSuffix(5)}`;
    while (await tx.instances.getByName(user.id, name))
      name = `${master.name.slice(0, NAME_MAX - 6)}-${randomSuffix(5)}`;
    const nic = randomUUID();
    const clone: InstanceRec = {
      ...master,
      id: randomUUID(),
      name,
      created_at: new Date(this.deps.clock.now()).toISOString(),
      features: master.features.filter((f) => f !== 'scale-to-zero'),
      state: 'starting',
      desired: 'running',
      ...NEVER_RUN,
      service_group_id: g.id,
      private_ip: await allocateIp(tx, this.deps.subnet),
      mac: macFor(nic),
      nic_id: nic,
      autoscale_group_id: g.id,
      host_id: await placeInTx(tx),
      runtime: {},
    };
    await tx.instances.insert(clone);
    await this.deps.groups.onInstanceAttachedInTx(tx, user, g.id);
    return clone;
  }

  async addPolicy(user: UserRec, t: Target, p: PolicyIn) {
    return this.deps.store.tx(async (tx) => {
      const g = await findGroup(tx, user, t);
      const c = await tx.autoscale.get(g.id);
      if (!c) throw err('UH_AUTOSCALE_NOT_CONFIGURED', `autoscale is not configured for service group '${g.name}'`);
      const policy = checkPolicy(p);
      if (c.policies.some((x) => x.name === policy.name))
        throw err('UH_EXISTS', `policy '${policy.name}' already exists`);
      await tx.autoscale.update(g.id, { policies: [...c.policies, policy] });
      return { uuid: g.id, name: g.name };
    });
  }

  async getPolicies(user: UserRec, t: Target, name?: string) {
    return this.deps.store.read(async (tx) => {
      const g = await findGroup(tx, user, t);
      const c = await tx.autoscale.get(g.id);
      if (!c) throw err('UH_AUTOSCALE_NOT_CONFIGURED', `autoscale is not configured for service group '${g.name}'`);
      if (name === undefined) return c.policies;
      const p = c.policies.find((x) => x.name === name);
      if (!p) throw err('UH_NOT_FOUND', `No policy with name '${name}'`);
      return [p];
    });
  }

  async deletePolicy(user: UserRec, t: Target, name: string) {
    return this.deps.store.tx(async (tx) => {
      const g = await findGroup(tx, user, t);
      const c = await tx.autoscale.get(g.id);
      if (!c) throw err('UH_AUTOSCALE_NOT_CONFIGURED', `autoscale is not configured for service group '${g.name}'`);
      if (!c.policies.some((x) => x.name === name)) throw err('UH_NOT_FOUND', `No policy with name '${name}'`);
      await tx.autoscale.update(g.id, { policies: c.policies.filter((x) => x.name !== name) });
      return { name };
    });
  }

  /** Deleting a master resets autoscale and deletes the instances autoscale created. */
  async onInstanceDeletedInTx(tx: Tx, user: UserRec, inst: InstanceRec): Promise<void> {
    const c = await tx.autoscale.forMaster(inst.id);
    if (!c) return;
    await tx.autoscale.delete(c.group_id);
    for (const i of await tx.instances.inGroup(c.group_id)) {
      if (i.autoscale_group_id === c.group_id) await this.deps.instances.deleteInTx(tx, user, i);
    }
  }
}
