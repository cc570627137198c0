import type { Logger } from 'pino';
import { endedForGood } from '../domain/instance-states.js';
import { err } from '../errors.js';
import type { InstanceRec } from '../store/types.js';
import type { ControllerDeps } from './deps.js';

/** What a wake found: the master runs (true), or why it cannot serve (false). */
export type WakeResult = { ok: true } | { ok: false; why: string };

/**
 * Scale-to-zero wakes (docs/autoscale.md): the data plane calls `wake` when
 * a group has no running instance. If the group has scale-to-zero
 * (autoscale `min_size` 0) and its master is in `standby`, or on its way
 * there, the master is started (same record: uuid, private IP, volumes;
 * `start_count` grows) and the call resolves once it is `running`, which
 * means its published ports accept (docs/guest-contract.md). Concurrent
 * wakes of a group share one start. Holds are bounded: at most
 * `maxHeldPerGroup` callers per group wait, for at most `timeoutMs`; past
 * either, or when the master cannot start, the answer is false and the data
 * plane answers 503 with Retry-After.
 */
export class Waker {
  private readonly inFlight = new Map<string, { held: number; done: Promise<WakeResult> }>();
  /** callers held per group (through the shared start and what each does before its request goes) */
  private readonly holding = new Map<string, number>();
  /** when each group's last held caller was let go (ms since the epoch) */
  private readonly released = new Map<string, number>();

  constructor(
    private readonly deps: ControllerDeps,
    private readonly log: Logger,
  ) {}

  /** Callers held for a group now (the idle clock of scale-to-zero must not stop a master they wait for). */
  held(groupId: string): number {
    return this.holding.get(groupId) ?? 0;
  }

  /**
   * When the group's last held caller was let go (ms since the epoch, 0 =
   * never). A released caller is traffic on its way to the master: it counts
   * as activity before the data plane's counters can show it.
   */
  lastReleased(groupId: string): number {
    return this.released.get(groupId) ?? 0;
  }

  /**
   * What scale-to-zero reads of a group's master (src/reconcile/autoscale.ts):
   * what the data plane `seen` (open connections, last activity) together
   * with the callers this waker holds or has just let go.
   */
  traffic(groupId: string, seen?: { busy: number; lastActivity: number }) {
    return {
      busy: seen?.busy ?? 0,
      lastActivity: Math.max(seen?.lastActivity ?? 0, this.lastReleased(groupId)),
      held: this.held(groupId),
    };
  }

  /**
   * Wakes the group's master (shared with concurrent callers). `whileHeld`
   * runs once it runs, with the caller still held: what must happen before
   * the request can be sent to it (the gateway's backend table catching up)
   * does not count as idle time of the master.
   */
  async wake(groupId: string, whileHeld?: () => Promise<void>): Promise<WakeResult> {
    const { maxHeldPerGroup } = this.deps.config.gateway.wake;
    let f = this.inFlight.get(groupId);
    if (f && f.held >= maxHeldPerGroup) {
      return { ok: false, why: `${maxHeldPerGroup} requests are already waiting for this service to start` };
    }
    if (!f) {
      const entry = { held: 0, done: Promise.resolve<WakeResult>({ ok: false, why: 'not started' }) };
      entry.done = this.run(groupId).finally(() => this.inFlight.delete(groupId));
      this.inFlight.set(groupId, entry);
      f = entry;
    }
    f.held++;
    this.holding.set(groupId, (this.holding.get(groupId) ?? 0) + 1);
    try {
      const r = await f.done;
      if (r.ok && whileHeld) await whileHeld();
      return r;
    } finally {
      f.held--;
      const n = (this.holding.get(groupId) ?? 1) - 1;
      if (n > 0) this.holding.set(groupId, n);
      else this.holding.delete(groupId);
      this.released.set(groupId, this.deps.clock.now());
    }
  }

  private async run(groupId: string): Promise<WakeResult> {
    const t0 = this.deps.clock.now();
    let master: InstanceRec;
    try {
      const m = await this.startMaster(groupId);
      if (!m) return { ok: false, why: 'no instance of it is running' };
      master = m;
    } catch (e) {
      this.log.warn({ group: groupId, err: (e as Error).message }, 'wake: the master cannot be started');
      return { ok: false, why: `its instance cannot be started: ${(e as Error).message}` };
    }
    if (master.state === 'running') return { ok: true };
    const r = await this.untilRunning(master.id, this.deps.config.gateway.wake.timeoutMs);
    const ms = this.deps.clock.now() - t0;
    if (r.ok) this.log.info({ group: groupId, instance: master.id, ms }, 'wake: the master runs');
    else this.log.warn({ group: groupId, instance: master.id, ms, why: r.why }, 'wake: failed');
    return r;
  }

  /**
   * Starts the master of a scale-to-zero group if it is in standby or on its
   * way there; returns it, or undefined when the group has no scale-to-zero
   * master that traffic may start (a master stopped by its user stays stopped).
   */
  private async startMaster(groupId: string): Promise<InstanceRec | undefined> {
    // What traffic did, not a request anyone was answered (TxOptions.runtime): lost with a power loss,
    // the master is in standby still and the next request wakes it.
    return this.deps.store.tx(
      async (tx) => {
        const c = await tx.autoscale.get(groupId);
        if (!c?.enabled || c.min_size !== 0) return undefined;
        const m = await tx.instances.getAny(c.master_id);
        if (!m) return undefined;
        if (m.desired === 'running') return endedForGood(m) ? undefined : m; // running, booting, or coming back up
        const toStandby = m.state === 'standby' || m.stop_request?.standby === true;
        if (!toStandby) return undefined;
        const user = await tx.users.get(m.user_id);
        if (!user) throw err('UH_NOT_FOUND', 'the owner of this service is gone');
        this.log.info({ group: groupId, instance: m.id, from: m.state }, 'wake: starting the master');
        return this.deps.instances.startInTx(tx, user, m, false, 'wake');
      },
      { runtime: true },
    );
  }

  /** Resolves when the instance is running, or why not: it stopped, was deleted, or `timeoutMs` passed. */
  private untilRunning(id: string, timeoutMs: number): Promise<WakeResult> {
    return new Promise((resolve) => {
      let settled = false;
      const finish = (r: WakeResult): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        off();
        resolve(r);
      };
      const check = async (): Promise<void> => {
        const i = await this.deps.store.read((tx) => tx.instances.getAny(id));
        if (!i) finish({ ok: false, why: 'its instance was deleted' });
        else if (i.state === 'running') finish({ ok: true });
        else if (i.desired === 'stopped' || endedForGood(i))
          finish({ ok: false, why: 'its instance stopped while starting' });
      };
      const timer = setTimeout(
        () => finish({ ok: false, why: `its instance did not start within ${timeoutMs} ms` }),
        timeoutMs,
      );
      const off = this.deps.store.watch('now', (e) => {
        if (e.type === 'resync' || (e.kind === 'instance' && e.id === id)) void check().catch(() => undefined);
      });
      void check().catch(() => undefined);
    });
  }
}
