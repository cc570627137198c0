import type { Controller, ControllerDeps } from './deps.js';
import { fire } from '../domain/instance-states.js';
import { ADMISSION } from '../domain/hosts.js';
import { STOP } from '../machines/stop-info.js';
import type { HostRec, InstanceRec, Tx } from '../store/types.js';

/** Instance states that hold (or are about to hold) a VM, or wait for one in standby. */
const LIVE = new Set(['starting', 'running', 'draining', 'stopping', 'standby']);

type Deps = Pick<ControllerDeps, 'store' | 'clock' | 'config' | 'instances' | 'placement' | 'hostId'>;

/** A grace after a lease runs out before others act on it: the host's own watchdog acts first. */
export const DEAD_AFTER_MS = 1000;

/**
 * Marks hosts whose lease ran out (plus DEAD_AFTER_MS) dead and takes their
 * instances over (docs/hosts.md, "Failover"): the epoch goes up first, in
 * its own transaction, so the lost agent's renewals fail from then on.
 * Then, one transaction per instance: its VM is gone (stop reason 20,
 * platform, forced); instances meant to run that restart by policy
 * (`always`, `on-failure`) and scale-to-zero masters start on another host;
 * the others stay `stopped`; a standby master is placed on another host and
 * wakes there. Returns the names of the hosts it marked dead.
 */
export async function failOverDeadHosts(
  deps: Deps,
  /** told why a batch went one at a time (each instance's notice says why it could not move) */
  onBatchFailed: (host: string, e: unknown) => void = () => undefined,
): Promise<string[]> {
  const store = deps.store;
  const now = Date.now(); // leases are on the wall clock (src/domain/hosts.ts)
  const expired = (await store.read((tx) => tx.hosts.list())).filter(
    (h) =>
      // never its own host: a process whose agent was paused (a suspended laptop, a starved CPU) renews its
      // lease when it runs again; another host's keeper declares it dead if it stays away (one host alone
      // has no one to hand its instances to)
      h.id !== deps.hostId &&
      h.state !== 'dead' &&
      h.lease_expires_at !== null &&
      Date.parse(h.lease_expires_at) + DEAD_AFTER_MS < now,
  );
  const marked: string[] = [];
  for (const stale of expired) {
    const won = await store.tx(async (tx) => {
      await tx.lock(ADMISSION);
      const h = await tx.hosts.get(stale.id);
      // renewed, or another process marked it meanwhile
      if (!h || h.state === 'dead' || h.epoch !== stale.epoch || h.lease_expires_at !== stale.lease_expires_at)
        return false;
      await tx.hosts.update(h.id, { state: 'dead', epoch: h.epoch + 1 });
      return true;
    });
    if (!won) continue;
    marked.push(stale.name);
    const ids = (await store.read((tx) => tx.instances.onHost(stale.id))).map((i) => i.id);
    // TAKEOVER_BATCH at a time, so the other hosts get them together. If one of a batch cannot be placed,
    // each of it goes alone, and what cannot move is stopped with the reason said.
    for (let k = 0; k < ids.length; k += TAKEOVER_BATCH) {
      const batch = ids.slice(k, k + TAKEOVER_BATCH);
      try {
        await store.tx(async (tx) => {
          for (const id of batch) await takeOverInTx(deps, tx, stale, id);
        });
      } catch (e) {
        onBatchFailed(stale.name, e);
        for (const id of batch) await takeOver(deps, stale, id);
      }
    }
  }
  return marked;
}

/** Instances of a dead host taken over in one transaction (one each: 16 took 7 s on a busy machine). */
const TAKEOVER_BATCH = 32;

const lostText = (host: HostRec): string => `host '${host.name}' was lost (its agent's lease ran out)`;

/** One instance of a dead host: settled, and started (or placed in standby) elsewhere when it should run. */
async function takeOver(deps: Deps, host: HostRec, id: string): Promise<void> {
  const store = deps.store;
  const lost = lostText(host);
  try {
    await store.tx((tx) => takeOverInTx(deps, tx, host, id));
  } catch (e) {
    // no host has room (or it is pinned to the lost host by a volume): stopped, with the reason said
    await store.tx(async (tx) => {
      const cur = await tx.instances.getAny(id);
      if (!cur || cur.host_id !== host.id) return;
      if (LIVE.has(cur.state) && cur.state !== 'standby') await settle(deps, tx, cur);
      tx.events.notice(cur, `${lost}; it could not start elsewhere: ${(e as Error).message}`);
    });
  }
}

/** The instance's VM went with its host: stopped by the platform (forced), no restart pending. */
function settle(deps: Deps, tx: Tx, cur: InstanceRec): Promise<InstanceRec | undefined> {
  return fire(tx, cur, 'exited', {
    stop_request: null,
    stop_reason: STOP.P | STOP.F,
    exit_code: null,
    stop_code: null,
    stopped_at: new Date(deps.clock.now()).toISOString(),
    restart_next_at: null,
    runtime: {},
  });
}

/** takeOver's work in `tx`; throws when the instance cannot be placed on another host. */
async function takeOverInTx(deps: Deps, tx: Tx, host: HostRec, id: string): Promise<void> {
  const lost = lostText(host);
  const elsewhere = (i: InstanceRec) =>
    i.desired === 'running' && (i.restart_policy !== 'never' || i.features.includes('scale-to-zero'));
  const cur = await tx.instances.getAny(id);
  if (!cur || cur.host_id !== host.id) return;
  if (cur.state === 'standby') {
    // no VM to lose: it waits for traffic on another host (its snapshot, if any, was a file on the lost one)
    await deps.placement.moveInTx(tx, cur);
    if (cur.snapshot) await tx.instances.updateStatus(cur.id, { snapshot: null });
    tx.events.notice(cur, `${lost}: it waits in standby on another host`);
    return;
  }
  if (!LIVE.has(cur.state)) return;
  const stopped = await settle(deps, tx, cur);
  if (!stopped || !elsewhere(cur)) {
    tx.events.notice(cur, `${lost}: the instance stopped`);
    return;
  }
  const user = (await tx.users.get(cur.user_id))!;
  await deps.instances.startInTx(tx, user, stopped, false);
  tx.events.notice(cur, `${lost}: the instance starts on another host`);
}

/**
 * One step of draining host `host` (docs/hosts.md, "Drain"): its running
 * instances stop gracefully, the platform's stop with the instance still
 * meant to run, so the stop's end starts it again, on another host (a
 * draining host takes no instances). Members of one service group go one at
 * a time: a member is stopped only while no member of its group is
 * starting, stopping or waiting to start, so a group of two or more keeps
 * serving. Instances pinned by a volume stay (said in the host list).
 * Standby ones are placed elsewhere at once. Returns how many it moved.
 */
export async function drainStep(deps: Deps, host: HostRec): Promise<number> {
  return deps.store.tx(async (tx) => {
    const h = await tx.hosts.get(host.id);
    if (!h || h.state !== 'draining') return 0;
    let moved = 0;
    const busyGroups = new Set<string>();
    for (const i of await tx.instances.onHost(h.id)) {
      if (!i.service_group_id || busyGroups.has(i.service_group_id)) continue;
      const members = await tx.instances.inGroup(i.service_group_id);
      if (members.some((m) => m.state === 'starting' || m.state === 'stopping' || m.state === 'draining'))
        busyGroups.add(i.service_group_id);
      if (members.some((m) => m.state === 'stopped' && m.desired === 'running' && m.restart_next_at !== null))
        busyGroups.add(i.service_group_id);
    }
    for (const i of await tx.instances.onHost(h.id)) {
      if ((await tx.volumes.forInstance(i.id)).length > 0) continue; // pinned: its volume's file is here
      if (i.state === 'standby') {
        await deps.placement.moveInTx(tx, i);
        if (i.snapshot) await tx.instances.updateStatus(i.id, { snapshot: null });
        tx.events.notice(i, `host '${h.name}' is being drained: the instance waits in standby on another host`);
        moved++;
        continue;
      }
      if (i.state !== 'running' || i.desired !== 'running' || i.stop_request) continue;
      if (i.service_group_id) {
        if (busyGroups.has(i.service_group_id)) continue;
        busyGroups.add(i.service_group_id);
      }
      // the stop's end starts it again (desired stays running): placement then avoids this host
      await fire(tx, i, 'stop', { stop_request: { force: false, drain_until: null, by: 'platform' } });
      tx.events.notice(i, `host '${h.name}' is being drained: the instance stops here and starts on another host`);
      moved++;
    }
    return moved;
  });
}

/**
 * When a keeper looks at the hosts next, in ms from `now`: a quarter lease
 * at most, and at the moment another host's lease plus DEAD_AFTER_MS runs
 * out if that comes first. A host renewing stays seconds away from it; one
 * that stopped renewing is acted on when its time is up, not up to a
 * quarter lease later (a failover's wait on the keeper's timer, 0-750 ms of
 * a 3 s lease, was on every failover's path).
 */
export function nextLookMs(hosts: HostRec[], selfId: string, leaseMs: number, now = Date.now()): number {
  let wait = leaseMs / 4;
  for (const h of hosts) {
    if (h.id === selfId || h.state === 'dead' || h.lease_expires_at === null) continue;
    const due = Date.parse(h.lease_expires_at) + DEAD_AFTER_MS - now;
    // due already (another keeper's transaction may be ahead): the quarter lease's look comes soon enough
    if (due > 0) wait = Math.min(wait, due + 5);
  }
  return wait;
}

/**
 * Watches the hosts (every process with the api or agent role runs one; the
 * store's transactions make them agree): marks a host whose lease ran out
 * dead and takes its instances over, and moves the instances of draining
 * hosts, a step every quarter lease and when a lease is due to run out
 * (`nextLookMs`).
 */
export class HostKeeper implements Controller {
  private timer: NodeJS.Timeout | undefined;
  private busy: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly s: Deps,
    private readonly log: { info(o: object, m: string): void; warn(o: object, m: string): void },
  ) {}

  async start(): Promise<void> {
    this.schedule();
  }

  private schedule(waitMs = this.s.config.host.leaseMs / 4): void {
    if (this.closed) return;
    // step() never rejects: it logs what failed and says when to look next
    this.timer = setTimeout(() => {
      this.busy = this.step().then((ms) => this.schedule(ms));
    }, waitMs);
  }

  /** One look at the hosts: failover, then a drain step of each draining host. Returns when to look next. */
  async step(): Promise<number | undefined> {
    try {
      const dead = await failOverDeadHosts(this.s, (host, e) =>
        this.log.warn({ host, err: e }, 'failover: a batch could not be taken over together; one instance at a time'),
      );
      for (const name of dead) this.log.warn({ host: name }, 'host lease ran out: host dead, its instances taken over');
      const hosts = await this.s.store.read((tx) => tx.hosts.list());
      for (const h of hosts)
        if (h.state === 'draining') {
          const n = await drainStep(this.s, h);
          if (n > 0) this.log.info({ host: h.name, moved: n }, 'drain: instances moving to other hosts');
        }
      return nextLookMs(hosts, this.s.hostId, this.s.config.host.leaseMs);
    } catch (e) {
      this.log.warn({ err: e }, 'looking at the hosts failed (tried again shortly)');
      return undefined;
    }
  }

  async stop(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.busy;
  }
}
