import { Balancer } from './balancer.js';
import type { Ctx } from './context.js';
import { Listener } from './listener.js';
import { Stats } from './stats.js';
import { TlsContexts } from './tls-contexts.js';
import {
  DEFAULT_LIMITS,
  type Counters,
  type GatewayOptions,
  type KeyPair,
  type ListenResult,
  type Route,
} from './types.js';
import { Upstreams } from './upstreams.js';

/**
 * The data plane: one listener per published public port, routing by SNI
 * (TLS ports) or Host (port 80) to the running instances of a group,
 * per-request balancing with `http`, per-connection without. The owner
 * (daemon) feeds it routes and a backends() view of the store; the machine
 * controller drains and disconnects instances through it.
 */
export class Gateway {
  private readonly listeners = new Map<number, Listener>();
  private readonly ctx: Ctx;
  private readonly contexts: TlsContexts;
  private readonly stats: Stats;
  private readonly balancer: Balancer;
  private readonly upstreams: Upstreams;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly o: GatewayOptions) {
    const limits = { ...DEFAULT_LIMITS, ...o.limits };
    this.stats = new Stats({ onIdle: o.onIdle, onActivity: o.onActivity });
    this.balancer = new Balancer(o.backends, o.onNoBackend);
    this.upstreams = new Upstreams(limits);
    this.contexts = new TlsContexts(o.metroDomain.toLowerCase(), o.tls, o.certFor);
    this.ctx = {
      limits,
      balancer: this.balancer,
      stats: this.stats,
      upstreams: this.upstreams,
      log: o.log,
      acmeChallenge: o.acmeChallenge,
    };
  }

  /**
   * Replaces the whole route table. Opens listeners for new public ports and
   * closes those no route uses any more; other ports' connections are not
   * touched. A port that cannot be bound is reported (and retried on the next
   * call) without failing the others. Calls are serialized.
   */
  setRoutes(routes: Route[]): Promise<ListenResult[]> {
    const run = this.queue.then(() => this.applyRoutes(routes));
    this.queue = run.catch(() => {});
    return run;
  }

  private async applyRoutes(routes: Route[]): Promise<ListenResult[]> {
    if (this.closed) throw new Error('gateway is closed');
    const byPort = new Map<number, Route[]>();
    for (const r of routes) {
      const norm = { ...r, fqdns: r.fqdns.map((f) => f.toLowerCase().replace(/\.$/, '')) };
      byPort.set(r.port, [...(byPort.get(r.port) ?? []), norm]);
    }
    for (const [port, l] of this.listeners) {
      if (byPort.has(port)) continue;
      this.listeners.delete(port);
      await l.close();
      this.o.log.info({ port }, 'gateway: listener closed');
    }
    const results: ListenResult[] = [];
    for (const [port, rs] of byPort) {
      const have = this.listeners.get(port);
      if (have) {
        have.setRoutes(rs);
        results.push({ port, boundPort: have.boundPort });
        continue;
      }
      results.push(await this.open(port, rs));
    }
    this.stats.keepGroups(new Set(routes.map((r) => r.groupId)));
    return results;
  }

  private async open(port: number, rs: Route[]): Promise<ListenResult> {
    const l = new Listener(port, this.ctx, this.contexts);
    l.setRoutes(rs);
    try {
      const bound = await l.listen(this.o.listenHost, this.o.portMap ? this.o.portMap(port) : port);
      this.listeners.set(port, l);
      this.o.log.info({ port, bound, host: this.o.listenHost }, 'gateway: listening');
      return { port, boundPort: bound };
    } catch (e) {
      await l.close().catch(() => {});
      this.o.log.error({ port, err: (e as Error).message }, 'gateway: cannot listen on public port');
      return { port, error: (e as Error).message };
    }
  }

  /** The port actually bound for a public port (tests), or undefined. */
  boundPort(publicPort: number): number | undefined {
    return this.listeners.get(publicPort)?.boundPort;
  }

  /** Open client connections on a public port (all groups), or 0 when it is not listened on. */
  clientConnections(publicPort: number): number {
    return this.listeners.get(publicPort)?.openConnections ?? 0;
  }

  /** Open connections, tunnels and in-flight requests of an instance. */
  connections(instanceId: string): number {
    return this.stats.connections(instanceId);
  }

  counters(): Counters {
    return this.stats.snapshot();
  }

  /**
   * Stops sending new work to an instance at once (whatever backends() says)
   * and resolves 'idle' when its last connection or request ended, or
   * 'timeout' after `timeoutMs` (< 0: no limit), when what is left is cut.
   * Call when the instance enters `draining`; backends() must report it as
   * not running from then on, since the local mark ends when this settles.
   */
  async drain(instanceId: string, timeoutMs: number): Promise<'idle' | 'timeout'> {
    this.balancer.markDraining(instanceId);
    const w = this.stats.whenIdle(instanceId);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((r) => {
      if (timeoutMs >= 0) timer = setTimeout(() => r('timeout'), timeoutMs);
    });
    try {
      const result = await Promise.race([w.promise.then(() => 'idle' as const), timeout]);
      if (result === 'timeout') this.disconnect(instanceId);
      else this.upstreams.closeInstance(instanceId);
      return result;
    } finally {
      clearTimeout(timer);
      w.cancel();
      this.balancer.unmarkDraining(instanceId);
    }
  }

  /** Cuts every connection and request of an instance (stopped, crashed, drain timeout). Returns how many. */
  disconnect(instanceId: string): number {
    this.upstreams.closeInstance(instanceId, true);
    return this.stats.disconnect(instanceId);
  }

  /** Drops an instance's counters once it is deleted. */
  forgetInstance(instanceId: string): void {
    this.stats.forgetInstance(instanceId);
  }

  /**
   * Installs the certificates of custom FQDNs (the whole set; see
   * src/certs/dataplane.ts): new handshakes use them at once, open
   * connections keep theirs. A custom name left out is refused until it has one.
   */
  setCertificates(certs: { names: string[]; pair: KeyPair }[]): string[] {
    return this.contexts.setCustom(certs);
  }

  /** The TLS-ALPN-01 challenge certificates to show `acme-tls/1` clients (the whole set). */
  setAlpnChallenges(certs: { name: string; pair: KeyPair }[]): void {
    this.contexts.setAlpnChallenges(certs);
  }

  /** Replaces the metro wildcard certificate (renewal); new handshakes use it. */
  setCertificate(pair: KeyPair): void {
    this.contexts.setWildcard(pair);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.queue;
    const ls = [...this.listeners.values()];
    this.listeners.clear();
    await Promise.all(ls.map((l) => l.close()));
    await this.upstreams.close();
  }
}
