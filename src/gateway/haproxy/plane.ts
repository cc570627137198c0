import { spawnSync } from 'node:child_process';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { DEFAULT_LIMITS } from '../types.js';
import { Departures } from '../departures.js';
import type { Backend, Counters, DataPlane, GatewayOptions, KeyPair, ListenResult, Route } from '../types.js';
import { Activator } from './activator.js';
import { AcmeTlsServer } from './acme-tls.js';
import { PlaneCerts } from './certs.js';
import { mapEntries, planeFiles, renderConfig, renderMap, routesByPort, type PlaneFiles } from './config.js';
import { applyMaps, type MapTable } from './maps.js';
import { StatCounters, statNames } from './counters.js';
import { SlotPool, type Slot } from './slots.js';
import { TcpWake } from './tcp-wake.js';
import { freePort, HaproxyProcess } from './process.js';
import { refused } from './runtime.js';
import { applyServers, RejectedCommand, shutdownInstance, wantedServers, type ServerTable } from './servers.js';
import pLimit from 'p-limit';

export interface HaproxyPlaneOptions extends GatewayOptions {
  /** the daemon's data dir: HAProxy's files go to <dataDir>/haproxy/ */
  dataDir: string;
  /** how often `show stat` is read (counters, drains, supervision) */
  statsIntervalMs?: number;
  /** HAProxy worker threads (`nbthread`); default: HAProxy's, one per CPU */
  threads?: number;
  /** CPU weight of HAProxy's cgroup, cgroup v2's scale (0 = none: it stays where the daemon runs) */
  cpuWeight?: number;
  /** log abnormal requests and connections (HAProxy's log lines) at warn */
  logErrors?: boolean;
  /** least time between two reloads (default 250 ms) */
  minReloadGapMs?: number;
  /** picks the port for a public port mapped to 0 (default: one the OS reports free) */
  pickPort?: (host: string) => Promise<number>;
  /** the user HAProxy's workers run as, chrooted (a root daemon only; default `haproxy`, else `nobody`) */
  workerUser?: string;
}

/**
 * The uid and gid HAProxy's workers drop to: the `haproxy` user Debian's
 * package makes, else `nobody` (65534). None when the daemon is not root
 * (it could neither chroot nor change uid).
 */
export function workerIdentity(user = 'haproxy'): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  for (const name of [user, 'nobody']) {
    const r = spawnSync('getent', ['passwd', name], { encoding: 'utf8' });
    const [, , uid, gid] = r.status === 0 ? r.stdout.split(':') : [];
    if (uid && gid) return { uid: Number(uid), gid: Number(gid) };
  }
  return { uid: 65534, gid: 65534 };
}

/** HAProxy's refusal to bind a frontend's port: public port, reason, address. */
const BIND_FAILED = /for frontend p(\d+)(?:_tls)?: cannot bind socket \(([^)]+)\) for \[([^\]]+)\]/;
/** Least time between two reloads (each leaves an old worker behind while its connections end). */
const MIN_RELOAD_GAP_MS = 250;
/** With no user's group routed (the platform's own routes alone, or none), the stats poll reads every this many ticks (pollDue) */
const UNROUTED_POLL_EVERY = 20;
/**
 * The stats are read whole at most this often (ms); the polls between read
 * the frontends and the backends with servers or open sessions only
 * (liveBackends): a platform with many groups whose instances are stopped
 * does not parse their rows 4 times a second.
 */
const FULL_STATS_MS = 5_000;
/** Past this many live backends a poll reads everything: the command stays short (HAProxy reads a line of at most tune.bufsize, 16 KiB). */
const MAX_PARTIAL_BACKENDS = 100;
/** A port that could not be bound is tried again after this long (each try costs a failed reload). */
const BLOCK_RETRY_MS = 60_000;

/**
 * The data plane on HAProxy (docs/gateway.md). The route table's shape (ports, their modes, and
 * pools of backends per port: slots.ts) is rendered into haproxy.cfg and
 * loaded with a master reload, which keeps established connections on the
 * old worker; groups, instances, drains and names coming and going are
 * applied through the Runtime API without a reload.
 * Everything is re-rendered from the wanted state after HAProxy restarts or
 * refuses a command, so HAProxy can always be brought back in step.
 */
export class HaproxyDataPlane implements DataPlane {
  private readonly f: PlaneFiles;
  private readonly proc: HaproxyProcess;
  private readonly activator: Activator;
  private readonly wake: TcpWake;
  private readonly stats: StatCounters;
  private readonly limits;
  /** route tables, certificates and drains are applied one at a time */
  private readonly serial = pLimit(1);
  private closed = false;
  private started = false;
  /** instances that left (`leave`), ordered against the applies: see `apply` */
  private readonly departures = new Departures();
  private lastReload = 0;
  /** the newest route table not applied yet, and what the last apply gave */
  private wanted: Route[] | null = null;
  private lastResults: ListenResult[] = [];
  /** reloads since start (tests, metrics) */
  reloads = 0;
  private routes: Route[] = [];
  private bound = new Map<number, number>();
  private byPortHost = new Map<number, Map<string, Route>>();
  private readonly pool = new SlotPool();
  /** every rendered backend of every port, with the group it serves now */
  private slots = new Map<number, Slot[]>();
  /** what HAProxy has loaded: the configuration without servers, maps, servers */
  private loadedShape = '';
  private readonly acmeTls = new AcmeTlsServer();
  /** names with a TLS-ALPN-01 challenge, as rendered into the configuration */
  private acmeNames: string[] = [];
  private maps: MapTable = new Map();
  private servers: ServerTable = new Map();
  private readonly certs: PlaneCerts;
  private poll: NodeJS.Timeout | null = null;
  private polling = false;
  /** the timer's polls since the last one that read with no user's group routed (pollDue) */
  private unroutedPolls = 0;
  /** when the stats were last read whole (readStats) */
  private fullStatsAt = 0;
  private readonly drainPending = new Set<string>();
  /** public ports HAProxy could not bind, left out until `until` */
  private readonly blocked = new Map<number, { error: string; until: number }>();
  private readonly pickPort = () => (this.o.pickPort ?? freePort)(this.o.listenHost);

  /** HAProxy's workers' uid and gid (PlaneState.worker) */
  private readonly worker: { uid: number; gid: number } | undefined;

  constructor(private readonly o: HaproxyPlaneOptions) {
    this.f = planeFiles(path.join(o.dataDir, 'haproxy'));
    this.worker = workerIdentity(o.workerUser);
    this.limits = { ...DEFAULT_LIMITS, ...o.limits };
    this.certs = new PlaneCerts(o.tls);
    this.proc = new HaproxyProcess(this.f, o.log, o.cpuWeight, o.logErrors === true);
    // a short pause so that a HAProxy that cannot start does not spin
    this.proc.onExit = () => setTimeout(() => this.resync('haproxy exited'), 500).unref();
    this.stats = new StatCounters({ onActivity: o.onActivity, onIdle: o.onIdle });
    const onForward = (g: string, i: string) => this.stats.openDirect(g, i);
    const connect = { timeoutMs: this.limits.connectTimeoutMs, retries: this.limits.connectRetries };
    this.wake = new TcpWake({ backends: o.backends, onNoBackend: o.onNoBackend, onForward, connect, log: o.log });
    this.activator = new Activator({
      routes: () => this.byPortHost,
      backends: o.backends,
      onNoBackend: o.onNoBackend,
      acmeChallenge: o.acmeChallenge,
      onAnswered: (g, i, out) => this.stats.addGroupBytes(g, i, out),
      onForward,
      connect,
      log: o.log,
    });
  }

  /**
   * Replaces the route table and syncs the servers from backends(); one
   * change at a time. Tables that arrive while one is applied are folded:
   * only the newest is applied next (one reload for a burst), and every
   * caller gets the results of the table then in force.
   */
  setRoutes(routes: Route[]): Promise<ListenResult[]> {
    this.wanted = routes;
    return this.serial(async () => {
      const next = this.wanted;
      if (next === null) return this.lastResults; // a newer table was applied in our place
      this.wanted = null;
      this.lastResults = await this.applyRoutes(next);
      return this.lastResults;
    });
  }

  private async applyRoutes(routes: Route[]): Promise<ListenResult[]> {
    if (this.closed) throw new Error('gateway is closed');
    const now = Date.now();
    for (const [p, b] of this.blocked) if (b.until <= now) this.blocked.delete(p);
    const all = routes.map((r) => ({ ...r, fqdns: r.fqdns.map((x) => x.toLowerCase().replace(/\.$/, '')) }));
    // a port HAProxy could not bind lately is left out (tried again after BLOCK_RETRY_MS): it must not hold up the others
    this.routes = all.filter((r) => !this.blocked.has(r.port));
    const results: ListenResult[] = [];
    for (const p of new Set(all.map((r) => r.port))) {
      const b = this.blocked.get(p);
      if (b) results.push({ port: p, error: b.error });
    }
    const ports = new Set(this.routes.map((r) => r.port));
    for (const p of this.bound.keys()) if (!ports.has(p)) this.bound.delete(p);
    const picked: number[] = []; // ports mapped to 0: another process can take one before HAProxy binds it
    for (const p of ports) {
      if (this.bound.has(p)) continue;
      const want = this.o.portMap ? this.o.portMap(p) : p;
      if (want === 0) picked.push(p);
      this.bound.set(p, want === 0 ? await this.pickPort() : want);
    }
    try {
      for (let tries = 0; ; tries++) {
        try {
          await this.applyPicking(picked);
          break;
        } catch (e) {
          // a fixed port another process holds (or one we may not bind): leave it out, keep the rest
          const m = BIND_FAILED.exec((e as Error).message);
          const port = m ? Number(m[1]) : NaN;
          if (!m || !ports.has(port) || picked.includes(port) || tries >= 8) throw e;
          const error = `cannot listen on ${m[3]}: ${m[2]}`;
          this.o.log.error({ port, error }, 'gateway: a published port cannot be bound; the others go on');
          this.blocked.set(port, { error, until: Date.now() + BLOCK_RETRY_MS });
          results.push({ port, error });
          ports.delete(port);
          this.bound.delete(port);
          this.routes = this.routes.filter((r) => r.port !== port);
        }
      }
      for (const p of ports) results.push({ port: p, boundPort: this.bound.get(p) });
    } catch (e) {
      const error = (e as Error).message;
      this.o.log.error({ err: error }, 'gateway: haproxy could not apply the route table');
      for (const p of ports) results.push({ port: p, error });
    }
    this.stats.keepGroups(new Set(this.routes.map((r) => r.groupId)));
    return results;
  }

  /** `apply`; when a port just picked for `picked` was taken before HAProxy bound it, picks again (twice at most). */
  private async applyPicking(picked: number[], attempt = 1): Promise<void> {
    try {
      await this.apply();
    } catch (e) {
      const failed = BIND_FAILED.exec((e as Error).message);
      const mine = failed === null || picked.includes(Number(failed[1])); // older HAProxy messages name no frontend
      if (picked.length === 0 || attempt >= 3 || !mine || !/Address already in use/.test((e as Error).message)) throw e;
      this.o.log.warn({ ports: picked }, 'gateway: a free port was taken before haproxy bound it; picking again');
      for (const p of picked) this.bound.set(p, await this.pickPort());
      return this.applyPicking(picked, attempt + 1);
    }
  }

  /** Brings HAProxy to the wanted state: a reload when the shape changed, runtime commands otherwise. */
  private async apply(forceReload = false): Promise<void> {
    // The backend table read here is true of instances that left before now (the owner takes them out
    // of it). One that leaves while this apply runs (a reload can wait a second for its turn) stays in
    // maintenance: neither the reloaded configuration nor the commands below may bring it back.
    const n = this.departures.beginRead();
    this.departures.settle(n);
    const leftMeanwhile = (id: string) => this.departures.leftSince(id, n);
    const byPort = routesByPort(this.routes);
    this.byPortHost = new Map(
      [...byPort].map(([p, rs]) => [p, new Map(rs.flatMap((r) => r.fqdns.map((n) => [n, r])))]),
    );
    const slots = this.pool.assign(byPort);
    this.slots = slots;
    const wakePorts = await this.wakePorts(slots);
    const activatorPorts = await this.activatorPorts([...byPort.keys()]);
    const state = (withServers: boolean) => ({
      wakePorts,
      listenHost: this.o.listenHost,
      threads: this.o.threads,
      limits: this.limits,
      logErrors: this.o.logErrors === true,
      worker: this.worker,
      activatorPorts,
      acme: { port: this.acmeTls.port, names: this.acmeNames },
      ports: new Map(
        [...byPort].map(([p, rs]) => [p, { bound: this.bound.get(p)!, routes: rs, slots: slots.get(p)! }]),
      ),
      backends: withServers ? this.o.backends : () => [],
    });
    const slotOf = (p: number, g: string) => this.pool.slotOf(p, g);
    const wantMaps = new Map([...byPort].map(([p, rs]) => [p, mapEntries(p, rs, slotOf)]));
    const wantServers = wantedServers(slots, this.o.backends);
    const shape = renderConfig(state(false), this.f);
    const wantCerts = this.certs.want(this.routes, this.o.metroDomain);
    if (forceReload || !this.started || shape !== this.loadedShape) {
      await this.certs.write(this.f, wantCerts);
      // Rendered once the reload's turn has come (it can wait a second): an instance that left meanwhile
      // is not in it, so the new worker never routes to it, not even before the commands below.
      const leftAtRender = new Set<string>();
      const rendered = (g: string): Backend[] =>
        this.o.backends(g).map((b) => {
          if (!leftMeanwhile(b.instanceId)) return b;
          leftAtRender.add(b.instanceId);
          return { ...b, state: 'other' };
        });
      await this.load(() => renderConfig({ ...state(true), backends: rendered }, this.f), wantMaps);
      this.loadedShape = shape;
      // the configuration has every server it names as ready; drains are runtime state
      this.servers = wantedServers(slots, (g) =>
        this.o
          .backends(g)
          .map((b) => ({ ...b, state: b.state === 'other' || leftAtRender.has(b.instanceId) ? 'other' : 'running' })),
      );
    }
    const draining = new Set<string>();
    for (const [be, servers] of wantServers)
      for (const [name, w] of servers)
        if (w.state === 'draining' && this.servers.get(be)?.get(name)?.state !== 'draining') draining.add(w.instanceId);
    try {
      await this.certs.apply(this.proc.admin, this.f, wantCerts);
      // names leave before their slot's servers go; names come after their slot's servers are there
      await applyMaps(this.proc.admin, this.f, this.maps, wantMaps, 'remove');
      await applyServers(this.proc.admin, this.servers, wantServers, leftMeanwhile);
      await applyMaps(this.proc.admin, this.f, this.maps, wantMaps, 'add');
      this.maps = wantMaps;
    } catch (e) {
      // HAProxy and our picture of it disagree: render everything again and reload, once
      if (!(e instanceof RejectedCommand) || forceReload) throw e;
      this.o.log.error({ err: e.message }, 'gateway: haproxy refused a runtime command; re-syncing with a reload');
      return this.apply(true);
    }
    if (draining.size > 0) this.settleDrains(draining);
  }

  /**
   * Until a stats poll that began after `state drain` has been read, an
   * instance entering its drain counts as busy (the last poll may predate a
   * request that just started); after it, an instance found idle is
   * reported with onIdle, so the owner does not wait for a drop that
   * already happened.
   */
  private settleDrains(ids: Set<string>): void {
    for (const id of ids) this.drainPending.add(id);
    void (async () => {
      while (this.polling) await new Promise((r) => setTimeout(r, 5));
      await this.readStats(true);
      for (const id of ids) {
        this.drainPending.delete(id);
        if (this.stats.connections(id) === 0) this.o.onIdle?.(id);
      }
    })();
  }

  /** The activator's TCP listener of every TCP backend, spares too (see tcp-wake.ts). */
  private async wakePorts(slots: Map<number, Slot[]>): Promise<Map<string, number>> {
    const m = new Map<string, number>();
    for (const ss of slots.values())
      for (const s of ss) {
        if (s.flavor !== 'tcp') continue;
        const target = s.route && { groupId: s.route.groupId, destinationPort: s.route.destinationPort };
        m.set(s.name, await this.wake.port(s.name, target));
      }
    this.wake.keep(new Set(m.keys()));
    return m;
  }

  /** The activator's two listeners of every public port (activator.ts); those of ports gone are closed. */
  private async activatorPorts(ports: number[]): Promise<Map<number, { fallback: number; backup: number }>> {
    const m = new Map<number, { fallback: number; backup: number }>();
    for (const p of ports)
      m.set(p, {
        fallback: await this.activator.portFor(p, 'fallback'),
        backup: await this.activator.portFor(p, 'backup'),
      });
    this.activator.keep(new Set(ports));
    return m;
  }

  /** The backend serving a group's public port now (tests, logs). */
  backendOf(port: number, groupId: string): string | undefined {
    return this.pool.slotOf(port, groupId);
  }

  /**
   * Writes the maps and the configuration, checks them, and starts or reloads HAProxy. The
   * configuration is rendered (`config`) once a reload's turn has come, after the wait below.
   */
  private async load(config: () => string, maps: MapTable): Promise<void> {
    await mkdir(this.f.dir, { recursive: true, mode: 0o700 });
    // the workers' root: entered by them (x), listed by nobody
    await mkdir(this.f.jail, { recursive: true });
    await chmod(this.f.jail, 0o711);
    for (const [p, m] of maps) await writeFile(this.f.map(p), renderMap(m));
    const starting = !this.started || !this.proc.running();
    if (!starting) {
      // Reloads are spaced: changes that arrive meanwhile queue behind this one and the
      // controller folds them into one more sync, so a burst of new ports is one or two reloads.
      const wait = this.lastReload + (this.o.minReloadGapMs ?? MIN_RELOAD_GAP_MS) - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    await writeFile(this.f.config, config());
    await this.proc.check();
    if (starting) {
      const how = await this.proc.start();
      this.o.log.info({ pid: this.proc.pid, how }, 'gateway: haproxy running');
      this.started = true;
    } else {
      await this.proc.reload();
      this.lastReload = Date.now();
      this.reloads++;
    }
    this.maps = maps;
  }

  /** Re-renders and reloads (or restarts) HAProxy from the wanted state, after a failure. */
  private resync(why: string): void {
    if (this.closed) return;
    this.o.log.warn({ why }, 'gateway: re-syncing haproxy from the wanted state');
    void this.serial(async () => {
      if (this.closed) return;
      if (!this.proc.running()) this.started = false;
      await this.apply(true);
    }).catch((e: Error) => this.o.log.error({ err: e.message }, 'gateway: haproxy re-sync failed'));
  }

  /** Starts the ACME TLS listener and the stats poll; HAProxy and the activator's listeners start with the first route table. */
  async start(): Promise<void> {
    await this.acmeTls.listen();
    this.poll = setInterval(() => void this.readStats(), this.o.statsIntervalMs ?? 250);
    this.poll.unref();
  }

  /**
   * Whether the timer's poll reads the stats: always while a user's group
   * is routed; with none, only every UNROUTED_POLL_EVERY-th (the first after
   * the last route went folds the ends in). The platform's own routes (the
   * registry and the console, `userId` '') have no instance whose idleness
   * or activity anything waits for: their counters (metrics) may lag. So a
   * platform without service groups does not read and parse the stats 4
   * times a second.
   */
  private pollDue(): boolean {
    if ([...this.slots.values()].some((ss) => ss.some((s) => s.route && s.route.userId !== ''))) {
      this.unroutedPolls = 0;
      return true;
    }
    return this.unroutedPolls++ % UNROUTED_POLL_EVERY === 0;
  }

  /** Reads the stats into the counters: the timer's poll when due (`pollDue`), or now (`force`). */
  private async readStats(force = false): Promise<void> {
    if (this.polling || !this.started || this.closed || !(force || this.pollDue())) return;
    this.polling = true;
    try {
      const now = Date.now();
      const live = now - this.fullStatsAt >= FULL_STATS_MS ? undefined : this.liveBackends();
      const command = live ? ['show stat -1 1 -1', ...live.map((b) => `show stat ${b} -1 -1`)].join(';') : 'show stat';
      const csv = await this.proc.admin.send(command).catch(() => undefined);
      if (csv === undefined) {
        if (!this.proc.running()) this.resync('haproxy is not running');
        return;
      }
      if (!live) this.fullStatsAt = now;
      this.stats.update(csv, statNames(this.slots, this.servers), Date.now(), live !== undefined);
    } finally {
      this.polling = false;
    }
  }

  /**
   * The backends a poll between two whole reads covers: those with servers
   * (their instances' sessions, activity and drains are what is waited on)
   * or with sessions open at the last read (until they are seen to end);
   * undefined, for a whole read, when there are more than
   * MAX_PARTIAL_BACKENDS of them.
   */
  private liveBackends(): string[] | undefined {
    const out: string[] = [];
    for (const ss of this.slots.values())
      for (const s of ss) {
        if (!s.route) continue;
        if ((this.servers.get(s.name)?.size ?? 0) === 0 && !this.stats.groupBusy(s.route.groupId)) continue;
        out.push(s.name);
        if (out.length > MAX_PARTIAL_BACKENDS) return undefined;
      }
    return out;
  }

  boundPort(publicPort: number): number | undefined {
    return this.started ? this.bound.get(publicPort) : undefined;
  }

  clientConnections(publicPort: number): number {
    return this.stats.clientConnections(publicPort);
  }

  connections(instanceId: string): number {
    const n = this.stats.connections(instanceId);
    return this.drainPending.has(instanceId) ? Math.max(1, n) : n;
  }

  counters(): Counters {
    return this.stats.snapshot();
  }

  /** Reads the stats now (tests, and before deciding on a drain). */
  refresh(): Promise<void> {
    return this.readStats(true);
  }

  /**
   * Stops new work to an instance (`state drain`) and resolves 'idle' once
   * HAProxy counts no session on it, or 'timeout' (sessions then cut).
   */
  async drain(instanceId: string, timeoutMs: number): Promise<'idle' | 'timeout'> {
    await this.serial(() => this.setServerState(instanceId, 'draining'));
    try {
      return await this.waitIdle(instanceId, timeoutMs);
    } finally {
      // the mark ends here: servers follow backends() again
      if (!this.closed) await this.serial(() => this.apply()).catch(() => {});
    }
  }

  private async waitIdle(instanceId: string, timeoutMs: number): Promise<'idle' | 'timeout'> {
    const end = timeoutMs >= 0 ? Date.now() + timeoutMs : Infinity;
    for (;;) {
      await this.readStats(true);
      if (this.stats.connections(instanceId) === 0) return 'idle';
      if (Date.now() >= end) break;
      await new Promise((r) => setTimeout(r, Math.min(50, Math.max(1, end - Date.now()))));
    }
    // cut what is left, and return once HAProxy's stats say so (at most a second later)
    await this.serial(() => shutdownInstance(this.proc.admin, this.servers, instanceId)).catch(() => {});
    for (let i = 0; i < 20 && this.stats.connections(instanceId) > 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      await this.readStats(true);
    }
    return 'timeout';
  }

  /**
   * Takes an instance's servers out at once (`state maint`), outside the
   * queue of route changes, which a busy platform can keep seconds behind:
   * a stop must not leave HAProxy sending new requests to a VM about to end
   * (likely what cut a request in one CI soak run). The group's backup, the activator,
   * takes them (and wakes a scale-to-zero master). Open sessions go on.
   */
  async leave(instanceId: string): Promise<void> {
    // the next sync enables it again (`state ready`) if the instance runs by then, or deletes it
    this.departures.leave(instanceId);
    if (this.started) await this.setServerState(instanceId, 'maint').catch(() => undefined);
  }

  /** Sets every server of an instance to `state` through the Runtime API, and records what HAProxy took. */
  private async setServerState(instanceId: string, state: 'draining' | 'maint'): Promise<void> {
    const haproxyState = state === 'draining' ? 'drain' : 'maint';
    for (const [be, servers] of this.servers)
      for (const [name, s] of servers)
        if (s.instanceId === instanceId && s.state !== state) {
          const answer = await this.proc.admin.send(`set server ${be}/${name} state ${haproxyState}`);
          if (!refused(answer)) servers.set(name, { ...s, state });
        }
  }

  /** Cuts every session of an instance; returns how many HAProxy counted at the last poll. */
  disconnect(instanceId: string): number {
    const n = this.connections(instanceId);
    void this.serial(() => shutdownInstance(this.proc.admin, this.servers, instanceId)).catch(() => {});
    return n;
  }

  forgetInstance(instanceId: string): void {
    this.stats.forgetInstance(instanceId);
  }

  /** Custom certificates (src/certs/dataplane.ts): applied at once through the Runtime API. Returns names that failed. */
  setCertificates(certs: { names: string[]; pair: KeyPair }[]): string[] {
    const { failed, changed } = this.certs.setCustom(certs);
    // the controller passes the whole set on every sync: HAProxy hears only of changes
    if (changed) void this.applySoon('certificates');
    return failed;
  }

  /**
   * TLS-ALPN-01 challenge certificates (the whole set): served by the
   * activator's TLS listener, to which the TLS ports hand `acme-tls/1`
   * clients of these names (a reload when the set of names changes).
   */
  setAlpnChallenges(certs: { name: string; pair: KeyPair }[]): Promise<void> {
    const names = this.acmeTls.set(certs);
    if (names.join(' ') === this.acmeNames.join(' ')) return Promise.resolve();
    this.acmeNames = names;
    return this.applySoon('TLS-ALPN-01 challenges');
  }

  /** The metro wildcard (renewal): applied at once. */
  setCertificate(pair: KeyPair): void {
    this.certs.set.wildcard = pair;
    void this.applySoon('wildcard certificate');
  }

  /** Applies a change of certificates or challenges now (once HAProxy runs: the first route table loads them). */
  private async applySoon(what: string): Promise<void> {
    if (!this.started || this.closed) return;
    await this.serial(() => this.apply()).catch((e: Error) =>
      this.o.log.error({ err: e.message, what }, 'gateway: haproxy could not apply a change'),
    );
  }

  /** The HAProxy master's pid (tests, logs). */
  pid(): number {
    return this.proc.pid;
  }

  /** The current worker's pid: it changes on every reload (tests). */
  workerPid(): Promise<number> {
    return this.proc.workerPid();
  }

  /**
   * Stops the activator and the poll; HAProxy is stopped too unless `keep`
   * (a daemon restart: the next one adopts it and its connections stay up).
   */
  async close(o: { keep?: boolean } = {}): Promise<void> {
    this.closed = true;
    if (this.poll) clearInterval(this.poll);
    await this.serial(() => undefined); // after the changes under way
    if (!o.keep) await this.proc.stop();
    await this.activator.close();
    await this.acmeTls.close();
    this.wake.close();
  }
}
