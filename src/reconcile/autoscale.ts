import { endedForGood, readyAt } from '../domain/instance-states.js';
import type { Logger } from 'pino';
import type { Controller, ControllerDeps } from './deps.js';
import { average, decide } from '../domain/autoscale.js';
import { CpuWindow } from '../domain/cpu-window.js';
import type { AutoscaleRec, InstanceRec } from '../store/types.js';
import type { TimerApi } from './engine.js';

export interface AutoscaleOptions {
  services: ControllerDeps;
  log: Logger;
  /** CPU time (ms) of an instance's VM process so far (the machine controller's `stats`) */
  cpuMs: (instanceId: string) => number | undefined;
  /** the instances whose VMs run on this host now (the machine driver's `list`): the ones sampled */
  vms: () => string[];
  /** sampling and evaluation period; 1000 by default */
  intervalMs?: number;
  /** window the per-instance CPU is averaged over; 3000 by default */
  windowMs?: number;
  /** tests drive `tick()` themselves and pass timers that never fire */
  timers?: TimerApi;
  /**
   * What the data plane saw of an instance, for scale-to-zero: open
   * connections and in-flight requests (`busy`), the time of its last
   * request or connection (`lastActivity`, ms since the epoch, 0 = never),
   * and clients of its group held while it wakes (`held`). Without it
   * (gateway off) nothing is scaled to zero.
   */
  traffic?: (groupId: string, instanceId: string) => { busy: number; lastActivity: number; held: number };
  /**
   * With several hosts: the CPU figures (millicores) other hosts' agents
   * published for these instances (src/figures.ts), by id; those without
   * one are left out.
   */
  remoteCpu?: (instanceIds: string[]) => Promise<Map<string, number>>;
}

/** Instances the autoscaler counts as the group's capacity: wanted up and not on their way out. */
function active(i: InstanceRec): boolean {
  return i.desired === 'running' && !endedForGood(i) && i.state !== 'draining' && i.state !== 'stopping';
}

/**
 * The autoscaler (docs/autoscale.md). Every interval it samples the CPU time
 * of every live VM into a small per-instance window, then evaluates each
 * enabled autoscale configuration: the group's CPU (millicores, averaged
 * over its running instances past warmup) is run through all policies
 * (src/domain/autoscale.ts), and the group is scaled out with clones of the
 * master or in by draining the newest clones. At most one scaling action
 * per cooldown.
 *
 * With several hosts (docs/hosts.md) every agent samples its own VMs, and
 * one decides for each group: the agent of the master's host, with the CPU
 * of members on other hosts from what their agents published. Scale-to-zero
 * is decided where the traffic is seen (the gateway's host).
 */
export class AutoscaleController implements Controller {
  private readonly windows = new Map<string, CpuWindow>();
  /** wall time of each group's last scaling action (cooldown) */
  private readonly lastAction = new Map<string, number>();
  /** scaling decisions since the daemon started, per group id (Prometheus `/metrics`) */
  private readonly decisions = new Map<string, { out: number; in: number }>();
  private timer: unknown = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private readonly intervalMs: number;
  private readonly windowMs: number;
  private readonly timers: TimerApi;

  constructor(private readonly o: AutoscaleOptions) {
    this.intervalMs = o.intervalMs ?? 1000;
    this.windowMs = o.windowMs ?? 3000;
    this.timers = o.timers ?? {
      setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
      clearTimeout: (t) => clearTimeout(t as NodeJS.Timeout),
    };
  }

  async start(): Promise<void> {
    this.schedule();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) this.timers.clearTimeout(this.timer);
    await this.running;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = this.timers.setTimeout(() => {
      void this.tick()
        .catch((e: unknown) => this.o.log.warn({ err: e }, 'autoscale: a pass failed (tried again next interval)'))
        .finally(() => this.schedule());
    }, this.intervalMs);
  }

  /** CPU of an instance's VM over the window, in millicores; undefined when not sampled. */
  cpuMillicores(instanceId: string): number | undefined {
    return this.windows.get(instanceId)?.millicores();
  }

  /** One sampling and evaluation pass (the timer's, or a test's). Passes never overlap. */
  async tick(): Promise<void> {
    while (this.running) await this.running;
    this.running = this.pass().finally(() => (this.running = null));
    return this.running;
  }

  /**
   * Samples this host's VMs, then reads the enabled configurations and
   * their groups' instances (two queries, whatever the number of instances
   * and groups) and evaluates, each in a transaction of its own, the groups
   * where there is something to decide: a running master, or a clone that
   * ended for good. A platform with many groups whose masters are stopped
   * costs a pass those two queries only.
   */
  private async pass(): Promise<void> {
    const s = this.o.services;
    this.sample(this.o.vms());
    const { configs, members } = await s.store.read(async (tx) => ({
      configs: await tx.autoscale.enabled(),
      members: await tx.instances.autoscaled(),
    }));
    const byGroup = new Map<string, InstanceRec[]>();
    for (const i of members) {
      const g = byGroup.get(i.service_group_id!);
      if (g) g.push(i);
      else byGroup.set(i.service_group_id!, [i]);
    }
    // the published CPU of members of autoscaled groups that run on other hosts (none on a single host)
    const elsewhere = members
      .filter(
        (i) => (i.state === 'running' || i.state === 'draining') && s.hostId && i.host_id && i.host_id !== s.hostId,
      )
      .map((i) => i.id);
    const remote = elsewhere.length > 0 && this.o.remoteCpu ? await this.o.remoteCpu(elsewhere) : new Map();
    for (const c of configs) {
      const group = byGroup.get(c.group_id) ?? [];
      const due = group.some(
        (i) =>
          (i.id === c.master_id && i.state === 'running') || (i.autoscale_group_id === c.group_id && endedForGood(i)),
      );
      if (!due) continue;
      try {
        await this.evaluate(c, remote);
      } catch (e) {
        this.o.log.warn({ group: c.group_id, err: e }, 'autoscale: evaluation failed');
        // e.g. a quota refusing clones: tried again after one cooldown, not every second
        this.lastAction.set(c.group_id, this.o.services.clock.now());
      }
    }
  }

  private sample(vms: string[]): void {
    const t = this.o.services.clock.now();
    const seen = new Set<string>();
    for (const id of vms) {
      const cpuMs = this.o.cpuMs(id);
      if (cpuMs === undefined) continue;
      seen.add(id);
      let w = this.windows.get(id);
      if (!w) this.windows.set(id, (w = new CpuWindow(this.windowMs)));
      w.add({ t, cpuMs });
    }
    for (const id of [...this.windows.keys()]) if (!seen.has(id)) this.windows.delete(id);
  }

  /** Decides and acts for one group, in one transaction (the store is the truth, not this pass's snapshot). */
  private async evaluate(c: AutoscaleRec, remote: Map<string, number>): Promise<void> {
    const s = this.o.services;
    const now = s.clock.now();
    await s.store.tx(async (tx) => {
      const cur = await tx.autoscale.get(c.group_id);
      const user = await tx.users.get(c.user_id);
      const g = await tx.groups.get(c.user_id, c.group_id);
      if (!cur?.enabled || !user || !g) return;
      const members = await tx.instances.inGroup(g.id);
      const clones = members.filter((i) => i.autoscale_group_id === g.id);
      // A clone that stopped by itself (exit, crash without restart) is no capacity: it goes.
      for (const i of clones) if (endedForGood(i)) await s.instances.deleteInTx(tx, user, i);
      const master = members.find((i) => i.id === cur.master_id);
      // Scaling follows a running master; a stopped master (or scale-to-zero standby) is left alone.
      if (!master || master.state !== 'running') return;
      const capacity = [master, ...clones.filter(active)];
      if (cur.min_size === 0 && capacity.length === 1 && this.idleFor(g.id, master, now) >= cur.cooldown_time_ms) {
        await s.autoscale.standbyInTx(tx, master);
        this.o.log.info(
          { group: g.name, instance: master.name, idle_ms: this.idleFor(g.id, master, now) },
          'autoscale: no traffic for one cooldown, the master goes to standby (scale-to-zero)',
        );
        return;
      }
      // One decider per group: the master's host (a single host decides for all).
      if (s.hostId && master.host_id && master.host_id !== s.hostId) return;
      const measured = capacity.filter(
        (i) => i.state === 'running' && Date.parse(i.started_at ?? '') + cur.warmup_time_ms <= now,
      );
      const values = new Map<string, number>();
      for (const i of measured) {
        // this host's VMs are sampled from their spawn on: the boot's CPU is not the load
        const m = this.windows.get(i.id)?.millicores(readyAt(i)) ?? remote.get(i.id);
        if (m !== undefined) values.set(i.name, m);
      }
      const metric = average([...values.values()]);
      if (metric === undefined) return; // everything still warming up: nothing to judge by
      // Policies never take the master away: with min_size 0 only idleness does (scale-to-zero, above).
      const d = decide(cur.policies, metric, capacity.length, { min: Math.max(cur.min_size, 1), max: cur.max_size });
      if (d.target === capacity.length) return;
      const last = this.lastAction.get(g.id);
      if (last !== undefined && now - last < cur.cooldown_time_ms) return;
      const facts = { group: g.name, cpu_millicores: Math.round(metric), instances: Object.fromEntries(values) };
      const why = { ...facts, from: capacity.length, to: d.target, policies: d.applied };
      if (d.target > capacity.length) {
        const made: string[] = [];
        for (let k = capacity.length; k < d.target; k++)
          made.push((await s.autoscale.cloneInTx(tx, user, g, master)).name);
        this.o.log.info({ ...why, created: made }, 'autoscale: scale out');
      } else {
        // Newest clones go first; the master never does.
        const out = clones
          .filter(active)
          .sort((a, b) => b.created_at.localeCompare(a.created_at))
          .slice(0, capacity.length - d.target);
        for (const i of out) await s.autoscale.drainCloneInTx(tx, user, i, cur.cooldown_time_ms);
        this.o.log.info({ ...why, draining: out.map((i) => i.name) }, 'autoscale: scale in');
      }
      this.lastAction.set(g.id, now);
      const n = this.decisions.get(g.id) ?? { out: 0, in: 0 };
      n[d.target > capacity.length ? 'out' : 'in']++;
      this.decisions.set(g.id, n);
    });
  }

  /**
   * How long (ms) the master has had no traffic: since its last request or
   * connection, or since it became ready if later (its spawn plus its boot
   * time: a slow boot is not idle time); 0 while anything is open or a client
   * is held for its group, and always 0 without a data plane.
   */
  private idleFor(groupId: string, master: InstanceRec, now: number): number {
    const t = this.o.traffic?.(groupId, master.id);
    if (!t || t.busy > 0 || t.held > 0) return 0;
    const since = Math.max(t.lastActivity, readyAt(master));
    return Math.max(0, now - since);
  }

  /** Scaling decisions taken since the daemon started, per service group id. May be called any time. */
  decisionCounts(): Record<string, { out: number; in: number }> {
    return Object.fromEntries(this.decisions);
  }
}
