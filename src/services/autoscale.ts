import { randomUUID } from 'node:crypto';
import type { Target } from '../domain/refs.js';
import { fire, NEVER_RUN, nextState, specDefaults } from '../domain/instance-states.js';
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
import { ADMISSION, placeInTx } from './capacity.js';

/**
 * What the master is made from when a configuration names none: a model
 * instance (`template`, copied as autoscale copies a master) or the fields
 * of an instance create request. `roms` is refused (instances boot a kernel).
 */
export interface CreateArgsIn {
  template?: { uuid?: string; name?: string };
  roms?: unknown;
  name?: string;
  image?: string;
  args?: string | string[];
  env?: Record<string, string>;
  memory_mb?: number;
  restart_policy?: string;
}

export interface AutoscaleIn {
  master?: { uuid?: string; name?: string };
  create_args?: CreateArgsIn;
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
  checkMasterSource(p);
  checkPolicies(p.policies ?? []);
}

/** Exactly one of `master` and `create_args`; `create_args` with exactly one of `template` and `image`. */
function checkMasterSource(p: AutoscaleIn): void {
  if (p.master !== undefined && p.create_args !== undefined)
    throw err('UH_NOT_BOTH', "give either 'master' or 'create_args', not both");
  if (p.master !== undefined) return void refTarget(p.master, 'master');
  const c = p.create_args;
  if (c === undefined)
    throw err('UH_MISSING_ID', "give 'master' (an instance in the group) or 'create_args' (what to create it from)");
  if (c.roms !== undefined)
    throw err(
      'UH_NOT_SUPPORTED',
      "parameter 'create_args.roms': not supported on this platform (instances boot a kernel image)",
    );
  if ((c.template === undefined) === (c.image === undefined))
    throw err('UH_INVALID', "parameter 'create_args': give exactly one of 'template' (an instance) or 'image'");
  if (c.template !== undefined) {
    refTarget(c.template, 'create_args.template');
    for (const k of ['args', 'env', 'memory_mb', 'restart_policy'] as const)
      if (c[k] !== undefined)
        throw err(
          'UH_INVALID',
          `parameter 'create_args.${k}' goes with 'image', not 'template' (the template gives it)`,
        );
  }
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
    checkMasterSource(p);
    return this.deps.store.tx(async (tx) => {
      const g = await findGroup(tx, user, t);
      const master =
        p.master !== undefined
          ? await findInstance(tx, user, refTarget(p.master, 'master'))
          : await this.masterInTx(tx, user, g, p.create_args!);
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
   * The master of a configuration created with `create_args`: attached to
   * the group and started, so the group serves at once. From a template, it
   * copies the model as scale-out copies a master (image digest, args, env,
   * memory, restart policy; no volumes) but is an instance of its own.
   */
  private async masterInTx(tx: Tx, user: UserRec, g: ServiceGroupRec, c: CreateArgsIn): Promise<InstanceRec> {
    if (await tx.autoscale.get(g.id))
      throw err('UH_AUTOSCALE_CONFIGURED', `autoscale is already configured for service group '${g.name}'`);
    if (c.template !== undefined) {
      const model = await findInstance(tx, user, refTarget(c.template, 'create_args.template'));
      return this.copyInTx(tx, user, g, model, { autoscaled: false, name: c.name });
    }
    return this.deps.instances.createOneInTx(tx, user, {
      name: c.name,
      image: c.image!,
      args: c.args,
      env: c.env,
      memory_mb: c.memory_mb,
      restart_policy: c.restart_policy,
      service_group: { uuid: g.id },
      autostart: true,
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
      await this.deleteInTx(tx, user, g);
      return { uuid: g.id, name: g.name };
    });
  }

  /** The configuration of `g` deleted inside `tx` (see `delete`; scale-to-zero turned off by an update too). */
  async deleteInTx(tx: Tx, user: UserRec, g: ServiceGroupRec): Promise<void> {
    const c = await tx.autoscale.get(g.id);
    if (!c) throw err('UH_AUTOSCALE_NOT_CONFIGURED', `autoscale is not configured for service group '${g.name}'`);
    await tx.autoscale.delete(g.id);
    for (const i of await tx.instances.inGroup(g.id)) {
      if (i.autoscale_group_id === g.id) await this.drainCloneInTx(tx, user, i, c.cooldown_time_ms);
    }
    const master = await tx.instances.get(user.id, c.master_id);
    if (master && (master.state === 'stopped' || master.state === 'standby'))
      await this.deps.instances.startInTx(tx, user, master, false);
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
      stop_request: {
        force: false,
        drain_until: null,
        by: 'platform',
        standby: true,
        // stateful scale-to-zero: the memory is kept in a snapshot (docs/snapshots.md)
        ...(master.features.includes('stateful') ? { snapshot: 'standby' as const } : {}),
      },
    });
  }

  /**
   * Scale-out: one clone of the master in its group (same image digest,
   * args, env, memory, restart policy; no volumes), started at once and
   * marked with `autoscale_group_id`. Quotas and host capacity apply.
   */
  async cloneInTx(tx: Tx, user: UserRec, g: ServiceGroupRec, master: InstanceRec): Promise<InstanceRec> {
    return this.copyInTx(tx, user, g, master, { autoscaled: true });
  }

  /** A started copy of `model` in `g`: a scale-out clone (`autoscaled`) or a master made from a template. */
  private async copyInTx(
    tx: Tx,
    user: UserRec,
    g: ServiceGroupRec,
    model: InstanceRec,
    o: { autoscaled: boolean; name?: string },
  ): Promise<InstanceRec> {
    const master = model;
    await tx.lock(ADMISSION);
    await assertQuota(tx, this.deps.config, user, {
      instances: 1,
      live_instances: 1,
      live_memory_mb: master.memory_mb,
    });
    const fresh = () => `${master.name.slice(0, NAME_MAX - 6)}-${randomSuffix(5)}`;
    let name = o.name ?? fresh();
    if (o.name !== undefined && (await tx.instances.getByName(user.id, name)))
      throw err('UH_EXISTS', `an instance named '${name}' already exists`);
    while (await tx.instances.getByName(user.id, name)) name = fresh();
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
      // the clone's own labels and lock start empty; its hostname is its own name
      ...specDefaults(),
      service_group_id: g.id,
      private_ip: await allocateIp(tx, this.deps.subnet),
      mac: macFor(nic),
      nic_id: nic,
      autoscale_group_id: o.autoscaled ? g.id : null,
      host_id: null,
      runtime: {},
    };
    // spread over hosts with the group's other members; a copy that restores a snapshot goes where its file is
    const [hostId] = await placeInTx(tx, this.deps.config.capacity, {
      count: 1,
      memoryMb: master.memory_mb,
      live: true,
      groupId: g.id,
      pinned:
        clone.snapshot && master.host_id
          ? { hostId: master.host_id, why: `the memory of '${master.name}' is a file on one host` }
          : null,
    });
    clone.host_id = hostId!;
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
