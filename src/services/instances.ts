import type { Target } from '../domain/refs.js';
import {
  describeStop,
  endedForGood,
  FROZEN,
  fire,
  isLive,
  nextState,
  STOP_INFO_STATES,
  stopFields,
  type InstanceTrigger,
} from '../domain/instance-states.js';
import { err } from '../errors.js';
import type { InstanceRec, InstanceState, Store, Tx, UserRec } from '../store/types.js';
import { stopReasonWithoutVm } from '../machines/stop-info.js';
import { createInTx, type CreateParams, type InstanceDeps } from './instances-create.js';
import type { NewInstanceParams } from './deps.js';
import { ADMISSION, admitStartInTx } from './capacity.js';
import { assertQuota } from './users.js';
import { WaitHub, type WaitLease } from './wait.js';
import { findInstance } from './lookup.js';
import { updateInstance } from './instance-updates.js';
import { findTemplate, makeTemplate } from './instance-templates.js';
import { checkpointHistory, createCheckpoint, type CheckpointParams } from './instance-checkpoints.js';
import type { UpdateIn } from '../domain/updates.js';

/** How much of an instance's history an answer holds (its newest entries). */
const HISTORY_MAX = 1000;
const HISTORY_SCAN = 100_000;
/** How long a call with wait waits, at most, for this process's gateway to have a running instance's routes. */
const ROUTES_WAIT_MS = 2000;

export interface StopParams {
  force?: boolean;
  drain_timeout_ms?: number;
}

export { findInstance };

/** A template or checkpoint never runs: start and stop are refused, naming what to do instead. */
function notTemplate(inst: InstanceRec, what: string): void {
  if (FROZEN.has(inst.state))
    throw err(
      'UH_WRONG_STATE',
      `instance '${inst.name}' is a ${inst.state} and is never ${what}: create instances from it (POST /v1/instances with ${inst.state})`,
    );
}

/** Instance lifecycle: records intent in the store; the machine controller makes it so. */
export class InstanceService {
  private hub: WaitHub | undefined;

  constructor(private readonly deps: InstanceDeps) {}

  /** Every wait of the daemon (GET wait, start and create with a wait timeout). */
  get waits(): WaitHub {
    return (this.hub ??= new WaitHub(this.store, this.deps.config.maxWaitsPerUser));
  }

  private get store(): Store {
    return this.deps.store;
  }

  /** Maps a timeout parameter (-1 = largest) to milliseconds. */
  timeout(ms: number | undefined, dflt: number): number {
    const v = ms ?? dflt;
    return v < 0 ? this.deps.config.maxTimeoutMs : Math.min(v, this.deps.config.maxTimeoutMs);
  }

  /** The spec's instance status object (GET /v1/instances). */
  async view(tx: Tx, user: UserRec, i: InstanceRec): Promise<Record<string, unknown>> {
    const now = this.deps.clock.now();
    const out: Record<string, unknown> = {
      uuid: i.id,
      name: i.name,
      created_at: i.created_at,
      state: i.state,
      image: i.image,
      memory_mb: i.memory_mb,
      args: i.args,
      env: i.env,
      start_count: i.start_count,
    };
    if (i.started_at) out.started_at = i.started_at;
    if (i.stopped_at && i.state === 'stopped') out.stopped_at = i.stopped_at;
    const runningSince = i.state === 'running' || i.state === 'draining' ? Date.parse(i.started_at ?? '') : NaN;
    out.uptime_ms = i.uptime_ms + (Number.isFinite(runningSince) ? Math.max(0, now - runningSince) : 0);
    if (user.developer) {
      for (const k of ['vmm_start_time_us', 'vmm_load_time_us', 'vmm_ready_time_us', 'net_time_us'] as const) {
        if (i[k] !== null) out[k] = i[k];
      }
      // The autoscaler's per-instance CPU (docs/autoscale.md), while it has samples.
      const cpu = isLive(i.state) ? (await this.deps.figures.instance(i.id)).cpuMillicores : undefined;
      if (cpu !== undefined) out.cpu_millicores = cpu;
    }
    if (i.boot_time_us !== null) out.boot_time_us = i.boot_time_us;
    if (STOP_INFO_STATES.has(i.state)) {
      if (i.stop_reason !== null) out.stop_reason = i.stop_reason;
      if (i.exit_code !== null) out.exit_code = i.exit_code;
      if (i.stop_code !== null) out.stop_code = i.stop_code;
    }
    out.restart_policy = i.restart_policy;
    out.restart = { attempt: i.restart_attempt, ...(i.restart_next_at ? { next_at: i.restart_next_at } : {}) };
    out.restart_count = i.restart_count;
    out.private_fqdn = `${i.name}.internal`;
    if (i.private_ip) out.private_ip = i.private_ip;
    if (i.service_group_id) {
      const g = await tx.groups.get(user.id, i.service_group_id);
      if (g) out.service_group = await this.deps.groups.summary(tx, g);
    }
    out.volumes = (await tx.volumes.forInstance(i.id)).map((v) => ({
      uuid: v.id,
      name: v.name,
      at: v.at,
      readonly: v.readonly,
    }));
    out.network_interfaces = i.nic_id ? [{ uuid: i.nic_id, private_ip: i.private_ip, mac: i.mac }] : [];
    if (i.features.length > 0) out.features = i.features;
    if (i.tags.length > 0) out.tags = i.tags;
    if (Object.keys(i.annotations).length > 0) out.annotations = i.annotations;
    if (i.delete_lock) out.delete_lock = true;
    if (i.hostname) out.hostname = i.hostname;
    // the memory a start (or a wake) resumes from (docs/snapshots.md)
    if (i.snapshot)
      out.snapshot = {
        size_bytes: i.snapshot.bytes,
        created_at: i.snapshot.created_at,
        reason: i.snapshot.reason,
        // a checkpoint: of which instance, and whether it is still being written
        ...(i.snapshot.taken_from ? { taken_from: i.snapshot.taken_from } : {}),
        ...(i.snapshot.pending ? { pending: true } : {}),
      };
    return out;
  }

  /** The status object; with `details` false only uuid, name and state. */
  async get(user: UserRec, t: Target, details = true): Promise<Record<string, unknown>> {
    return this.store.read(async (tx) => {
      const i = await findInstance(tx, user, t);
      return details ? this.view(tx, user, i) : { uuid: i.id, name: i.name, state: i.state };
    });
  }

  /** The list as JSON text built by the store (fast path of GET /v1/instances/list). */
  async listJson(user: UserRec, state?: InstanceState): Promise<string> {
    return this.store.read((tx) => tx.instances.listJson(user.id, state));
  }

  async list(user: UserRec, state?: InstanceState): Promise<{ uuid: string; name: string }[]> {
    const rows = await this.store.read((tx) => tx.instances.listIds(user.id, state));
    return rows.map((r) => ({ uuid: r.id, name: r.name }));
  }

  /**
   * Moves an instance towards running (PUT start, autostart, a restart by
   * policy, a wake with `trigger` 'wake'). Allowed in every state; does
   * nothing when it is already starting or running. A manual start aborts a
   * restart back-off sequence.
   */
  async startInTx(
    tx: Tx,
    user: UserRec,
    inst: InstanceRec,
    manual: boolean,
    trigger: 'start' | 'wake' = 'start',
  ): Promise<InstanceRec> {
    notTemplate(inst, 'started');
    // During a stop (draining/stopping) the stop request stays: it tells the controller who stopped
    // the VM; `desired: running` then makes it boot again once the VM is down.
    if (inst.desired !== 'running') await tx.instances.updateSpec(inst.id, { desired: 'running' });
    const to = nextState(inst.state, trigger);
    if (to && !isLive(inst.state)) {
      await assertQuota(tx, this.deps.config, user, { live_instances: 1, live_memory_mb: inst.memory_mb });
      await admitStartInTx(tx, this.deps.config.capacity, inst);
    }
    const after = await fire(tx, inst, trigger, { stop_request: null }, { resetRestarts: manual });
    const reset = manual ? { restart_attempt: 0, restart_next_at: null } : {};
    return after ?? { ...inst, ...reset, desired: 'running' };
  }

  async start(user: UserRec, t: Target, waitMs: number | undefined, signal?: AbortSignal) {
    const timeout = this.timeout(waitMs, 0);
    // Reserved before the start: a refused wait must not leave a half-done request.
    const lease = timeout > 0 ? this.waits.reserve(user.id, 1) : null;
    try {
      const { before, after } = await this.store.tx(async (tx) => {
        const inst = await findInstance(tx, user, t);
        return { before: inst, after: await this.startInTx(tx, user, inst, true) };
      });
      let now: InstanceRec | undefined = after;
      if (lease) {
        const deadline = this.deps.clock.now() + timeout;
        await this.waitBooted(lease, after.id, timeout, signal);
        now = await this.store.read((tx) => tx.instances.get(user.id, after.id));
        if (now?.state === 'running' && now.service_group_id) await this.routesInPlace(now.service_group_id, deadline);
      }
      const state = now?.state ?? after.state;
      return {
        uuid: after.id,
        name: after.name,
        state,
        previous_state: before.state,
        // a boot that failed while the call waited: say how it ended
        ...(lease && now && state === 'stopped' ? stopFields(now) : {}),
      };
    } finally {
      lease?.release();
    }
  }

  /** PUT stop: records the stop request; the controller performs it. Does not block. */
  async stop(user: UserRec, t: Target, p: StopParams) {
    return this.store.tx(async (tx) => {
      const inst = await findInstance(tx, user, t);
      notTemplate(inst, 'stopped');
      const drainMs = p.drain_timeout_ms === undefined ? 0 : this.timeout(p.drain_timeout_ms, 0);
      const trigger: InstanceTrigger = p.force ? 'stop-force' : drainMs > 0 ? 'stop-drain' : 'stop';
      if (inst.desired !== 'stopped') await tx.instances.updateSpec(inst.id, { desired: 'stopped' });
      const stop_request = {
        force: p.force ?? false,
        drain_until: trigger === 'stop-drain' ? this.deps.clock.now() + drainMs : null,
        by: 'user' as const,
      };
      // A standby instance has no VM to stop: it is stopped at once, with the fields of a stop without a VM.
      const withoutVm =
        inst.state === 'standby'
          ? {
              stop_request: null,
              stop_reason: stopReasonWithoutVm('user', p.force ?? false),
              stopped_at: new Date(this.deps.clock.now()).toISOString(),
              exit_code: null,
              stop_code: null,
            }
          : { stop_request };
      // A stop that would end in standby (a suspend or a scale-to-zero sleep under way) ends stopped
      // instead: its VM goes on stopping as it was, but keeps no memory and wakes for nothing.
      const req = inst.stop_request;
      if ((inst.state === 'stopping' || inst.state === 'draining') && req?.standby) {
        const { standby: _standby, snapshot, ...rest } = req;
        const plain = snapshot === 'template' ? { ...rest, snapshot } : rest;
        await fire(tx, inst, 'stop-for-good', { stop_request: plain }, { resetRestarts: true });
        return { uuid: inst.id, name: inst.name, state: inst.state, previous_state: inst.state };
      }
      // A manual stop always aborts a restart sequence, even on a stopped instance.
      const after = await fire(tx, inst, trigger, withoutVm, { resetRestarts: true });
      return { uuid: inst.id, name: inst.name, state: after?.state ?? inst.state, previous_state: inst.state };
    });
  }

  /**
   * PUT suspend (docs/snapshots.md): a stop of a running instance that
   * keeps its memory in a snapshot and leaves it in `standby`; start, or
   * traffic when it is a scale-to-zero master, resumes it. Where no
   * snapshot can be taken the stop goes on as a plain one and the next
   * start boots afresh (a notice event says so).
   */
  async suspend(user: UserRec, t: Target, p: { drain_timeout_ms?: number }) {
    return this.store.tx(async (tx) => {
      const inst = await findInstance(tx, user, t);
      if (inst.state !== 'running')
        throw err(
          'UH_WRONG_STATE',
          `instance '${inst.name}' is ${inst.state}: only a running instance can be suspended`,
        );
      const drainMs = p.drain_timeout_ms === undefined ? 0 : this.timeout(p.drain_timeout_ms, 0);
      await tx.instances.updateSpec(inst.id, { desired: 'stopped' });
      const after = await fire(
        tx,
        inst,
        drainMs > 0 ? 'stop-drain' : 'stop',
        {
          stop_request: {
            force: false,
            drain_until: drainMs > 0 ? this.deps.clock.now() + drainMs : null,
            by: 'user',
            standby: true,
            snapshot: 'suspend',
          },
        },
        { resetRestarts: true },
      );
      return { uuid: inst.id, name: inst.name, state: after?.state ?? inst.state, previous_state: inst.state };
    });
  }

  /**
   * POST /v1/instances/templates (docs/snapshots.md): makes the instance a
   * template; with a timeout, waits until it is one (a running instance is
   * snapshotted first). An instance that could not be (no snapshot: it
   * stopped instead) is an error then, with the notice's reason in its events.
   */
  async makeTemplate(user: UserRec, t: Target, timeoutMs: number | undefined, signal?: AbortSignal) {
    const r = await makeTemplate(this.deps, user, t);
    const timeout = this.timeout(timeoutMs, 0);
    if (timeout === 0 || r.state === 'template') return r;
    const lease = this.waits.reserve(user.id, 1);
    let rec;
    try {
      rec = await this.waitUntil(
        lease,
        r.uuid,
        (i) => i.state === 'template' || i.state === 'stopped',
        timeout,
        signal,
      );
    } finally {
      lease.release();
    }
    if (!rec) throw err('UH_TIMEOUT', `instance '${r.name}' did not become a template within ${timeout} ms`);
    if (rec.state === undefined) throw err('UH_NOT_FOUND', `instance '${r.name}' was deleted while waiting`);
    if (rec.state !== 'template')
      throw err(
        'UH_WRONG_STATE',
        `instance '${r.name}' stopped instead of becoming a template: no memory snapshot could be taken (its events and console log say why)`,
      );
    return { ...r, state: rec.state };
  }

  /**
   * POST /v1/instances/checkpoints (docs/snapshots.md, "Checkpoints"): a
   * checkpoint of a running instance; with a timeout, waits until it is
   * written (an error naming the reason when it could not be: it is gone
   * then, and the instance has a notice).
   */
  async createCheckpoint(user: UserRec, p: CheckpointParams, timeoutMs: number | undefined, signal?: AbortSignal) {
    const r = await this.store.tx((tx) => createCheckpoint(this.deps, tx, user, p));
    const timeout = this.timeout(timeoutMs, 0);
    if (timeout === 0) return r;
    const lease = this.waits.reserve(user.id, 1);
    let rec;
    try {
      rec = await this.waitUntil(lease, r.uuid, (i) => !i.snapshot?.pending, timeout, signal);
    } finally {
      lease.release();
    }
    if (!rec) throw err('UH_TIMEOUT', `checkpoint '${r.name}' was not written within ${timeout} ms`);
    if (rec.state === undefined)
      throw err(
        'UH_WRONG_STATE',
        `checkpoint '${r.name}' could not be taken (the instance's events and console log say why)`,
      );
    return r;
  }

  /** GET /v1/instances/checkpoints/history: the checkpoints kept of an instance. */
  checkpointHistory(user: UserRec, t: Target) {
    return this.store.read((tx) => checkpointHistory(tx, user, t));
  }

  /** GET /v1/instances/templates or /checkpoints: one's status object (or uuid, name and state). */
  async getKept(user: UserRec, t: Target, kind: 'template' | 'checkpoint', details = true) {
    return this.store.read(async (tx) => {
      const i = await findTemplate(tx, user, t, kind);
      return details ? this.view(tx, user, i) : { uuid: i.id, name: i.name, state: i.state };
    });
  }

  /** DELETE /v1/instances/templates or /checkpoints: instances made from one keep running (their memory is theirs). */
  async deleteKept(user: UserRec, t: Target, kind: 'template' | 'checkpoint') {
    const kept = await this.store.read((tx) => findTemplate(tx, user, t, kind));
    return this.delete(user, { uuid: kept.id });
  }

  /** PATCH /v1/instances/templates or /checkpoints: tags, annotations, delete_lock. */
  updateKept(user: UserRec, t: Target, kind: 'template' | 'checkpoint', u: UpdateIn) {
    return updateInstance(this.deps, user, t, u, (tx, user2, t2) => findTemplate(tx, user2, t2, kind));
  }

  /** DELETE: removes the record at once; the controller force-stops the VM and frees its resources. */
  async delete(user: UserRec, t: Target) {
    return this.store.tx(async (tx) => {
      const inst = await findInstance(tx, user, t);
      if (inst.delete_lock)
        throw err(
          'UH_NOT_ALLOWED',
          `instance '${inst.name}' has delete_lock set; unset it first (PATCH, prop delete_lock)`,
        );
      await this.deleteInTx(tx, user, inst);
      return { uuid: inst.id, name: inst.name, previous_state: inst.state };
    });
  }

  async deleteInTx(tx: Tx, user: UserRec, inst: InstanceRec): Promise<void> {
    await this.deps.autoscale.onInstanceDeletedInTx(tx, user, inst);
    await this.deps.volumes.onInstanceDeletedInTx(tx, user, inst);
    await tx.instances.delete(inst.id);
    if (inst.service_group_id) await this.deps.groups.onInstanceRemovedInTx(tx, user, inst.service_group_id);
  }

  async createOneInTx(tx: Tx, user: UserRec, p: NewInstanceParams): Promise<InstanceRec> {
    return (await createInTx(this.deps, tx, user, { ...p, replicas: 0 })).instances[0]!;
  }

  /** POST /v1/instances: one entry per created instance (replicas included). */
  async create(user: UserRec, p: CreateParams, signal?: AbortSignal): Promise<Record<string, unknown>[]> {
    const timeout = p.autostart ? this.timeout(p.wait_timeout_ms, 0) : 0;
    const lease = timeout > 0 ? this.waits.reserve(user.id, 1 + (p.replicas ?? 0)) : null;
    try {
      return await this.createAndWait(user, p, timeout, lease, signal);
    } finally {
      lease?.release();
    }
  }

  private async createAndWait(
    user: UserRec,
    p: CreateParams,
    timeout: number,
    lease: WaitLease | null,
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>[]> {
    await this.deps.proofs.prepare(
      user.id,
      (p.service_group?.domains ?? []).map((d) => d.name),
    );
    const { instances, summary } = await this.store.tx(
      async (tx) => {
        const r = await createInTx(this.deps, tx, user, p);
        return { instances: r.instances, summary: r.group ? await this.deps.groups.summary(tx, r.group) : null };
      },
      { locks: [ADMISSION] },
    );
    const deadline = this.deps.clock.now() + timeout;
    const out: Record<string, unknown>[] = [];
    for (const inst of instances) {
      let state = inst.state;
      let boot: number | null = null;
      let ended: Record<string, number> = {};
      if (lease) {
        await this.waitBooted(lease, inst.id, Math.max(0, deadline - this.deps.clock.now()), signal);
        const now = await this.store.read((tx) => tx.instances.getAny(inst.id));
        state = now?.state ?? state;
        // boot_time_us only for a boot that reached running; a failed boot says how it ended
        if (state === 'running') boot = now?.boot_time_us ?? null;
        if (now && state === 'stopped') ended = stopFields(now);
      }
      const e: Record<string, unknown> = {
        state,
        uuid: inst.id,
        name: inst.name,
        private_fqdn: `${inst.name}.internal`,
        private_ip: inst.private_ip,
      };
      if (summary) e.service_group = summary;
      if (lease && boot !== null) e.boot_time_us = boot;
      Object.assign(e, ended);
      out.push(e);
    }
    if (summary && out.some((e) => e.state === 'running')) await this.routesInPlace(String(summary.uuid), deadline);
    return out;
  }

  /**
   * Waits (at most until `deadline`, and 2 s) until this process's gateway
   * routes the group: its ports bound and its names mapped, so a client that
   * connects the moment the call answers is not refused (the port, or
   * `unrecognized_name`). A routed group's new server may still be on its
   * way: the gateway's backup, the activator, carries such a request to the
   * running instance. A gateway in another process is not waited for.
   */
  private async routesInPlace(groupId: string, deadline: number): Promise<void> {
    await this.deps.gateway?.whenRouted(groupId, Math.min(ROUTES_WAIT_MS, deadline - this.deps.clock.now()));
  }

  /** PATCH: one property (src/services/instance-updates.ts). */
  update(user: UserRec, t: Target, u: UpdateIn) {
    return updateInstance(this.deps, user, t, u);
  }

  /**
   * GET history: the instance's life from the durable event log (created,
   * each state change with the stop fields of a stop), oldest first, the
   * newest `HISTORY_MAX` entries.
   */
  async history(user: UserRec, t: Target) {
    return this.store.read(async (tx) => {
      const inst = await findInstance(tx, user, t);
      const events = await tx.events.after(user.id, 0, { instanceId: inst.id }, HISTORY_SCAN);
      const history = events.slice(-HISTORY_MAX).map((e) => ({
        uuid: e.instance_id,
        name: e.instance_name,
        created_at: e.at,
        event_id: e.id,
        event: e.type,
        ...(e.from_state ? { from_state: e.from_state } : {}),
        ...(e.to_state ? { to_state: e.to_state } : {}),
        ...stopFields(e),
        ...(e.message ? { message: e.message } : {}),
      }));
      return { uuid: inst.id, name: inst.name, history };
    });
  }

  /** GET log: a chunk of the console log with the spec's offset/limit semantics. */
  async log(user: UserRec, t: Target, offset: number, limit: number) {
    const inst = await this.store.read((tx) => findInstance(tx, user, t));
    const r = await this.deps.consoles.read(
      inst.id,
      offset,
      Math.min(limit, this.deps.config.maxLogChunk),
      inst.host_id,
    );
    return {
      uuid: inst.id,
      name: inst.name,
      output: r.output.toString('base64'),
      available: r.available,
      range: r.range,
    };
  }

  /**
   * GET wait: resolves each target when it reaches `state`; all targets
   * share one deadline. A target that times out gets a TimedOut error entry.
   */
  async wait(user: UserRec, t: Target, state: InstanceState, timeoutMs: number, signal?: AbortSignal) {
    const inst = await this.store.read((tx) => findInstance(tx, user, t));
    // Waiting for running ends early when the instance stops for good meanwhile (its boot failed or it
    // ended, and no restart is due); an instance that was already stopped may still be started later.
    const gaveUp = (rec: InstanceRec) => state === 'running' && endedForGood(rec) && rec.stopped_at !== inst.stopped_at;
    const lease = this.waits.reserve(user.id, 1);
    let r;
    try {
      r = await this.waitUntil(lease, inst.id, (rec) => rec.state === state || gaveUp(rec), timeoutMs, signal);
    } finally {
      lease.release();
    }
    if (!r) throw err('UH_TIMEOUT', `instance '${inst.name}' did not reach state '${state}' within ${timeoutMs} ms`);
    if (r.state === undefined) throw err('UH_NOT_FOUND', `instance '${inst.name}' was deleted while waiting`);
    if (r.state !== state) {
      const rec = await this.store.read((tx) => tx.instances.getAny(inst.id));
      throw err(
        'UH_WRONG_STATE',
        `instance '${inst.name}' stopped instead of reaching '${state}'${rec ? ` (${describeStop(rec)})` : ''}`,
      );
    }
    return { uuid: inst.id, name: inst.name, state: r.state };
  }

  /**
   * Resolves when the instance is running, or stopped for good (its boot
   * failed or it ended, and no restart is due): waiting longer cannot help.
   */
  waitBooted(lease: WaitLease, id: string, timeoutMs: number, signal?: AbortSignal) {
    return this.waitUntil(lease, id, (rec) => rec.state === 'running' || endedForGood(rec), timeoutMs, signal);
  }

  /** Re-checks `done` after each change of the instance; `{state: undefined}` when it was deleted. */
  private waitUntil(
    lease: WaitLease,
    id: string,
    done: (rec: InstanceRec) => boolean,
    timeoutMs: number,
    signal?: AbortSignal,
  ) {
    return lease.wait(
      'instance',
      id,
      async () => {
        const rec = await this.store.read((tx) => tx.instances.getAny(id));
        if (!rec) return { state: undefined as InstanceState | undefined };
        return done(rec) ? { state: rec.state as InstanceState | undefined } : undefined;
      },
      timeoutMs,
      signal,
    );
  }
}
