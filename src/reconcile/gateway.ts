import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Controller, ControllerDeps } from './deps.js';
import {
  Departures,
  ensureLocalCa,
  type Backend,
  type DataPlane,
  type GatewayOptions,
  type LocalCa,
  type Route,
} from '../gateway/index.js';
import type { InstanceRec } from '../store/types.js';
import { follow, RetryingQueue } from './engine.js';
import { CertInstaller } from './gateway-certs.js';
import { Waker } from './wake.js';

const DAY_MS = 86_400_000;
/** The group id of the platform's own route: the registry at `registry.<metro domain>` (docs/registry.md). */
export const REGISTRY_ROUTE = 'platform-registry';

/**
 * Keeps the gateway (docs/gateway.md) in step with the store: one route per
 * published port of every service group, and an in-memory backend table per
 * group (the gateway asks on every request, so it must not touch SQLite).
 * Only `running` instances get new traffic; `draining` ones keep what they
 * have; stopped ones are cut at once.
 */
export class GatewayController implements Controller {
  /** the data plane the routes go to (null until start) */
  dataPlane: DataPlane | null = null;
  ca: LocalCa | null = null;
  private backendsByGroup = new Map<string, Backend[]>();
  /** groups whose routes the data plane has applied (the last sync's table, ports it could not bind left out) */
  private routedGroups = new Set<string>();
  private readonly routeWaiters = new Map<string, Set<() => void>>();
  /** instances taken out ahead of their stop, until a read of the store after it says what they are */
  private readonly departures = new Departures();
  private readonly queue: RetryingQueue;
  private off: (() => void) | null = null;
  private offAlpn: (() => void) | null = null;
  private offHttp01: (() => void) | null = null;
  private renew: NodeJS.Timeout | null = null;
  private lastState = new Map<string, InstanceRec['state']>();
  private certs: CertInstaller | null = null;
  /** where this process's API listens, once it does (plain HTTP): the registry's route goes there */
  private api: { host: string; port: number } | null = null;
  /** scale-to-zero: starts a standby master for traffic that found no running instance */
  readonly waker: Waker;

  constructor(
    private readonly s: ControllerDeps,
    private readonly log: Logger,
    /** builds the data plane (src/drivers.ts picks it from `gateway.driver`) */
    private readonly makePlane: (o: GatewayOptions) => DataPlane,
    /** called when an instance's last connection closed (ends a drain early) */
    private readonly onIdle: (instanceId: string) => void = () => undefined,
  ) {
    this.queue = new RetryingQueue(
      () => this.sync(),
      (_k, e, failures, retryMs) => log.error({ err: e, failures, retry_ms: retryMs }, 'gateway sync failed'),
    );
    this.waker = new Waker(s, log);
  }

  async start(): Promise<void> {
    const g = this.s.config.gateway;
    this.ca = await ensureLocalCa(join(this.s.config.dataDir, 'ca'), this.s.config.metroDomain);
    this.log.info({ ca: this.ca.caPath }, 'gateway: metro wildcard certificate from the local CA (trust this CA file)');
    const o: GatewayOptions = {
      listenHost: g.listen,
      portMap: (p) => (g.portOffset < 0 ? 0 : p + g.portOffset),
      tls: { cert: this.ca.cert, key: this.ca.key },
      metroDomain: this.s.config.metroDomain,
      backends: (groupId) => this.backendsByGroup.get(groupId) ?? [],
      onIdle: (id) => this.onIdle(id),
      onNoBackend: (groupId) => this.wake(groupId),
      acmeChallenge: (host, token) => this.s.certificates.challenges.answer(host, token),
      log: this.log,
    };
    this.dataPlane = this.makePlane(o);
    await this.dataPlane.start?.();
    this.certs = new CertInstaller(this.s, this.dataPlane, this.log);
    const challenges = this.s.certificates.challenges;
    const gw = this.dataPlane;
    this.offAlpn = challenges.onAlpnChange(() => gw.setAlpnChallenges(challenges.alpnCertificates()));
    // HTTP-01: the name the order is for is in the store; the authority may ask once a sync has published it
    this.offHttp01 = challenges.onHttpChallenge(() => this.queue.kick('sync'));
    this.off = follow(this.s.store, {
      kinds: ['group', 'instance', 'certificate'],
      change: () => void this.queue.kick('sync'),
      resync: () => void this.queue.kick('sync'),
      resyncMs: this.s.config.store.resyncMs,
    });
    await this.sync();
    this.renew = setInterval(() => void this.renewCertificate(), DAY_MS);
    this.renew.unref();
  }

  private async renewCertificate(): Promise<void> {
    this.ca = await ensureLocalCa(join(this.s.config.dataDir, 'ca'), this.s.config.metroDomain);
    this.dataPlane?.setCertificate({ cert: this.ca.cert, key: this.ca.key });
  }

  async stop(): Promise<void> {
    this.off?.();
    this.offAlpn?.();
    this.offHttp01?.();
    if (this.renew) clearInterval(this.renew);
    await this.queue.stop();
    await this.dataPlane?.close();
  }

  /**
   * The data plane found no running instance for `groupId`: one that runs
   * by the store serves at once; else wake a scale-to-zero master, and once
   * it runs make sure the backend table says so before the held request is
   * routed.
   */
  private async wake(groupId: string): Promise<boolean> {
    const running = () => (this.backendsByGroup.get(groupId) ?? []).some((b) => b.state === 'running');
    // The backend table may lag the store by a sync (a group just made, an instance just running): one
    // read of the group, and a running instance there serves the request now instead of a 503.
    await this.refreshGroup(groupId);
    if (running()) return true;
    const r = await this.waker.wake(groupId, async () => {
      // the group's own backends first (one read): a whole sync (every group, the data plane) is on its way
      // for the change that made the master run, and the held request need not wait for it
      if (!running()) await this.refreshGroup(groupId);
      if (!running()) await this.queue.kick('sync');
    });
    if (!r.ok) this.log.debug({ group: groupId, why: r.why }, 'wake: no instance for the request (503)');
    return r.ok;
  }

  /** Reads one group's instances into its backend table (what `sync` does for every group). */
  private async refreshGroup(groupId: string): Promise<void> {
    const read = this.departures.beginRead();
    const list = await this.s.store.read(async (tx) => (await tx.instances.inGroup(groupId)).flatMap(backendOf));
    this.backendsByGroup = new Map(this.backendsByGroup).set(groupId, this.departures.keep(list, read));
  }

  /** What scale-to-zero needs to know of an instance's traffic (src/reconcile/autoscale.ts). */
  traffic(groupId: string, instanceId: string): { busy: number; lastActivity: number; held: number } {
    const c = this.dataPlane?.counters().instances[instanceId];
    return this.waker.traffic(groupId, c && { busy: c.openConnections, lastActivity: c.lastActivity });
  }

  /**
   * Publishes the registry of the API at `host:port` (plain HTTP) as
   * `registry.<metro domain>` on 443 with the metro certificate, and on 80
   * as a redirect to it. The daemon calls it once the API listens.
   */
  publishRegistry(host: string, port: number): void {
    this.api = { host: host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host, port };
    void this.queue.kick('sync');
  }

  /** Resolves once the changes seen so far are applied to the gateway (tests). */
  settled(): Promise<void> {
    return this.queue.drain();
  }

  /**
   * An instance is about to stop (the machine controller's `beforeStop`):
   * the data plane takes it out at once, without waiting for route syncs a
   * busy platform keeps queued; a plane that cannot waits for them. A
   * backend table read before now (a sync under way) does not bring it back.
   */
  async leave(instanceId: string): Promise<void> {
    this.departures.leave(instanceId);
    this.backendsByGroup = new Map(
      [...this.backendsByGroup].map(([g, list]) => [
        g,
        list.map((b) => (b.instanceId === instanceId ? { ...b, state: 'other' as const } : b)),
      ]),
    );
    const gw = this.dataPlane;
    if (gw?.leave) return gw.leave(instanceId);
    return this.settled();
  }

  /** Rebuilds routes and backends from the store (cheap: a few queries over groups and instances). */
  private async sync(): Promise<void> {
    const gw = this.dataPlane;
    if (!gw) return;
    const read = this.departures.beginRead();
    const { routes, backends, states, custom } = await this.s.store.read(async (tx) => {
      const routes: Route[] = [];
      const backends = new Map<string, Backend[]>();
      const states = new Map<string, InstanceRec['state']>();
      const custom = new Map<string, string[]>(); // certificate id -> custom FQDNs using it
      for (const g of await tx.groups.all()) {
        const domains = await tx.domains.forGroup(g.id);
        const fqdns = domains.map((d) => d.fqdn);
        for (const d of domains)
          if (d.certificate_id) custom.set(d.certificate_id, [...(custom.get(d.certificate_id) ?? []), d.fqdn]);
        // HTTP-01 needs port 80 for custom names: a group that does not publish it gets a redirect there.
        const acmeNames = domains.filter((d) => d.certificate_id).map((d) => d.fqdn);
        if (acmeNames.length > 0 && !g.services.some((svc) => svc.port === 80)) {
          routes.push({
            groupId: g.id,
            userId: g.user_id,
            port: 80,
            destinationPort: 443,
            handlers: ['http', 'redirect'],
            fqdns: acmeNames,
          });
        }
        for (const svc of g.services) {
          routes.push({
            groupId: g.id,
            userId: g.user_id,
            port: svc.port,
            destinationPort: svc.destination_port,
            handlers: svc.handlers,
            fqdns,
            ...(g.soft_limit !== null || g.hard_limit !== null
              ? { limits: { soft: g.soft_limit, hard: g.hard_limit } }
              : {}),
          });
        }
        const members = await tx.instances.inGroup(g.id);
        for (const i of members) states.set(i.id, i.state);
        backends.set(g.id, members.flatMap(backendOf));
      }
      if (this.api) {
        // the platform's own names: the registry (docs/registry.md) and the web console (docs/console.md)
        const metro = this.s.config.metroDomain.toLowerCase();
        const fqdns = [`registry.${metro}`, `console.${metro}`];
        const base = { groupId: REGISTRY_ROUTE, userId: '', destinationPort: this.api.port, fqdns };
        routes.push({ ...base, port: 443, handlers: ['tls', 'http'] });
        routes.push({ ...base, port: 80, destinationPort: 443, handlers: ['http', 'redirect'] });
        backends.set(REGISTRY_ROUTE, [{ instanceId: REGISTRY_ROUTE, host: this.api.host, state: 'running' }]);
      }
      return { routes, backends, states, custom };
    });
    await this.certs?.install(custom);
    this.backendsByGroup = new Map([...backends].map(([g, list]) => [g, this.departures.keep(list, read)]));
    this.departures.settle(read);
    // An instance that stopped or crashed is taken out at once: its connections are cut.
    for (const [id, prev] of this.lastState) {
      const now = states.get(id);
      if ((prev === 'running' || prev === 'draining') && now !== 'running' && now !== 'draining') gw.disconnect(id);
      if (now === undefined) gw.forgetInstance(id);
    }
    this.lastState = states;
    const failed = new Set<number>();
    for (const r of await gw.setRoutes(routes)) {
      if ('error' in r && r.error) {
        failed.add(r.port);
        this.log.warn(r, 'gateway: could not listen on a published port');
      }
    }
    this.routedGroups = new Set(routes.filter((r) => !failed.has(r.port)).map((r) => r.groupId));
    for (const [g, done] of this.routeWaiters) if (this.routedGroups.has(g)) for (const d of done) d();
  }

  /**
   * Resolves once the data plane routes `groupId` (its ports bound, its
   * names mapped), or after `ms`: a create or start with wait answers then
   * (docs/gateway.md, "Create and start with wait").
   */
  whenRouted(groupId: string, ms: number): Promise<void> {
    if (this.routedGroups.has(groupId) || ms <= 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const waiters = this.routeWaiters.get(groupId) ?? new Set<() => void>();
      this.routeWaiters.set(groupId, waiters);
      const done = (): void => {
        clearTimeout(t);
        waiters.delete(done);
        if (waiters.size === 0 && this.routeWaiters.get(groupId) === waiters) this.routeWaiters.delete(groupId);
        resolve();
      };
      const t = setTimeout(done, ms);
      t.unref();
      waiters.add(done);
      // the change that made the instance run has queued a sync already; one more is merged with it
      void this.queue.kick('sync');
    });
  }

  /** Open connections of an instance (the machine controller ends drains with it). */
  connections(instanceId: string): number | undefined {
    return this.dataPlane?.connections(instanceId);
  }
}

/** An instance as a backend of its group (none without a private address): only `running` ones get new traffic. */
function backendOf(i: InstanceRec): Backend[] {
  if (!i.private_ip) return [];
  const state = i.state === 'running' ? 'running' : i.state === 'draining' ? 'draining' : 'other';
  return [{ instanceId: i.id, host: i.private_ip, state }];
}
