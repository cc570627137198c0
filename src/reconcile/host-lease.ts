import { performance } from 'node:perf_hooks';
import type { Controller, ControllerDeps } from './deps.js';
import type { HostRec, LeaseRenewal, LeaseRenewals } from '../store/types.js';

/** The part of its lease an agent trusts: it stops acting at this fraction, before others may take over. */
export const HELD_FRACTION = 0.8;
/** Renewals per lease: three may fail before the agent stops acting. */
const RENEWALS = 4;

export interface LeaseHooks {
  /** takes the lease: a new epoch (src/services/hosts.ts registerHost) */
  register(): Promise<HostRec>;
  /** the lease was lost to a new epoch (the host was declared dead): stop acting; VMs go */
  lost(): void;
  /** the lease is held again after it was lost or ran out: act again, check everything */
  regained(): void;
  /** after each renewal: until when (wall clock, ms) this host's VMs may run (the watchdog's deadline) */
  renewed?(vmsUntil: number): void;
  /**
   * The file `renewed` keeps (the watchdog's). Renewals that run on their
   * own (Store.leaseRenewals) write it themselves after each renewal that
   * held: this event loop, busy with a burst of boots, was seconds late to
   * pass their outcome on, and the watchdog killed VMs of a host whose
   * lease was held (bench/hosts: a third of 48 boots). `renewed` is then
   * called only when the lease is taken (at start, and again with a new epoch).
   */
  vmsUntilFile?: string;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void };
}

/**
 * This host's lease (docs/hosts.md, "Leases and fencing"). The agent took it
 * at start (a new epoch); it is renewed every quarter of its length by a
 * write that names the epoch, so a renewal after another process declared
 * the host dead (and so raised the epoch) fails. The agent acts (boots,
 * stops, records) only while `held()`: for HELD_FRACTION of the lease from
 * the start of the last good renewal, on the monotonic clock, so it stops
 * before the others may act (at the lease's end plus a grace). A lost lease
 * is taken again with a new epoch once the store answers.
 */
export class HostLease implements Controller {
  private heldUntil = 0;
  private epoch = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private wasHeld = true;
  private busy: Promise<void> = Promise.resolve();
  private renewals: LeaseRenewals | undefined;
  /** the renewals keep the watchdog's file themselves (`LeaseHooks.vmsUntilFile`) */
  private renewalsWriteUntil = false;

  constructor(
    private readonly s: Pick<ControllerDeps, 'store' | 'clock' | 'config'>,
    private readonly hostId: string,
    first: HostRec,
    private readonly hooks: LeaseHooks,
  ) {
    this.took(first.epoch, performance.now());
  }

  private get leaseMs(): number {
    return this.s.config.host.leaseMs;
  }

  /** Whether this agent may act on its host's instances now. */
  held(): boolean {
    return !this.closed && performance.now() < this.heldUntil;
  }

  /** The lease is held from `t0` (when the write that took or renewed it was sent, on the monotonic clock). */
  private took(epoch: number, t0: number, renewal = false): void {
    this.epoch = epoch;
    this.heldUntil = t0 + this.leaseMs * HELD_FRACTION;
    if (renewal && this.renewalsWriteUntil) return;
    this.hooks.renewed?.(Date.now() + this.vmsAfterMs - (performance.now() - t0));
  }

  /** How long after a renewal was sent this host's VMs may run: past the agent's own trust, before others act. */
  private get vmsAfterMs(): number {
    return this.leaseMs * ((1 + HELD_FRACTION) / 2);
  }

  async start(): Promise<void> {
    const every = this.leaseMs / RENEWALS;
    const store = this.s.store;
    // where the store can, the renewals run outside this event loop (a worker thread on PostgreSQL)
    if (store.leaseRenewals) {
      const file = this.hooks.vmsUntilFile;
      this.renewals = store.leaseRenewals(
        {
          hostId: this.hostId,
          epoch: this.epoch,
          leaseMs: this.leaseMs,
          everyMs: every,
          ...(file ? { vmsUntil: { file, afterMs: this.vmsAfterMs } } : {}),
        },
        (r) => void (this.busy = this.busy.then(() => this.outcome(r))),
      );
      this.renewalsWriteUntil = !!file;
    } else this.schedule();
  }

  private schedule(): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      this.busy = this.renew().finally(() => this.schedule());
    }, this.leaseMs / RENEWALS);
  }

  /** One renewal from this event loop (a store without `leaseRenewals`). */
  private async renew(): Promise<void> {
    const at = performance.now();
    const epoch = this.epoch;
    const until = new Date(Date.now() + this.leaseMs).toISOString(); // the wall clock (src/domain/hosts.ts)
    let r: LeaseRenewal;
    try {
      r = { at, epoch, ok: await this.s.store.renewHostLease(this.hostId, epoch, until) };
    } catch (e) {
      r = { at, epoch, error: e as Error };
    }
    await this.outcome(r);
  }

  /** What a renewal's outcome means: held on; a store that does not answer (tried next time); lost, taken again. */
  private async outcome(r: LeaseRenewal): Promise<void> {
    // closed, or the outcome of an epoch given up already (sent before the lease was taken again)
    if (this.closed || r.epoch !== this.epoch) return;
    if ('error' in r) {
      if (this.wasHeld && !this.held())
        this.hooks.log.warn({ err: r.error }, 'host lease ran out: the store does not answer');
      this.wasHeld = this.held();
      return;
    }
    if (r.ok) {
      // ran out on this loop's clock before this outcome came (renewals that failed, or outcomes passed on
      // late by a busy loop): what was put off meanwhile is looked at again
      const lapsed = !this.held();
      this.took(this.epoch, r.at, true);
      if (!this.wasHeld || lapsed) {
        this.hooks.log.info({ epoch: this.epoch }, 'host lease held again');
        this.hooks.regained();
      }
      this.wasHeld = true;
      return;
    }
    // another process declared this host dead: its instances were moved or stopped
    this.heldUntil = 0;
    this.wasHeld = false;
    this.hooks.log.warn({ epoch: this.epoch }, 'host lease lost (the host was declared dead): stopping its VMs');
    this.hooks.lost();
    try {
      const t1 = performance.now();
      const h = await this.hooks.register();
      this.took(h.epoch, t1);
      this.renewals?.epoch(h.epoch);
      this.wasHeld = true;
      this.hooks.log.info({ epoch: h.epoch }, 'host lease taken again with a new epoch');
      this.hooks.regained();
    } catch (e) {
      this.hooks.log.warn({ err: e }, 'taking the host lease again failed; trying at the next renewal');
    }
  }

  async stop(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.renewals?.stop();
    await this.busy;
  }
}
