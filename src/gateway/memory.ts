import { createPrivateKey, X509Certificate } from 'node:crypto';
import { normalizeHost } from './answers.js';
import type { Counter, Counters, DataPlane, GatewayOptions, KeyPair, ListenResult, Route } from './types.js';

/** What a simulated request got: the status, and the instance that answered it. */
export interface MemoryAnswer {
  status: number;
  instanceId?: string;
}

const counter = (): Counter => ({ openConnections: 0, requests: 0, bytesIn: 0, bytesOut: 0, lastActivity: 0 });

/**
 * The data plane of unit tests (`gateway.driver: "memory"`): it keeps the
 * route table, the certificates and per-group and per-instance counters the
 * way `HaproxyDataPlane` does, and binds no port. `request` plays one HTTP
 * request through the table with the real plane's choices: the route by port
 * and name, round robin over running instances, the `redirect` handler, the
 * wake of a group without a running instance (`onNoBackend`), else 503.
 */
export class MemoryDataPlane implements DataPlane {
  private routes: Route[] = [];
  private readonly next = new Map<string, number>();
  private readonly groups = new Map<string, Counter>();
  private readonly instances = new Map<string, Counter & { groupId: string }>();
  /** names of the custom certificates installed, and the wildcard one */
  readonly certificates = new Map<string, KeyPair>();
  wildcard: KeyPair;
  alpnChallenges: string[] = [];

  constructor(
    private readonly o: GatewayOptions,
    private readonly now: () => number = Date.now,
  ) {
    this.wildcard = o.tls;
  }

  /** The route table as last set (tests). */
  table(): Route[] {
    return this.routes;
  }

  async setRoutes(routes: Route[]): Promise<ListenResult[]> {
    // names as HAProxy keeps them: lower case, no trailing dot
    this.routes = routes.map((r) => ({ ...r, fqdns: r.fqdns.map((x) => x.toLowerCase().replace(/\.$/, '')) }));
    return [...new Set(routes.map((r) => r.port))].sort((a, b) => a - b).map((port) => ({ port }));
  }

  /** Nothing listens. */
  boundPort(): number | undefined {
    return undefined;
  }

  clientConnections(): number {
    return 0;
  }

  /** Requests are played to the end at once: no instance has any under way. */
  connections(): number {
    return 0;
  }

  counters(): Counters {
    return { groups: Object.fromEntries(this.groups), instances: Object.fromEntries(this.instances) };
  }

  async drain(): Promise<'idle' | 'timeout'> {
    return 'idle';
  }

  disconnect(): number {
    return 0;
  }

  forgetInstance(instanceId: string): void {
    this.instances.delete(instanceId);
  }

  /** Installs the pairs whose certificate and key parse; returns the names of those that do not. */
  setCertificates(certs: { names: string[]; pair: KeyPair }[]): string[] {
    const failed: string[] = [];
    this.certificates.clear();
    for (const c of certs) {
      try {
        new X509Certificate(c.pair.cert);
        createPrivateKey(c.pair.key);
        for (const n of c.names) this.certificates.set(n, c.pair);
      } catch {
        failed.push(...c.names);
      }
    }
    return failed;
  }

  setAlpnChallenges(certs: { name: string; pair: KeyPair }[]): void {
    this.alpnChallenges = certs.map((c) => c.name).sort();
  }

  setCertificate(pair: KeyPair): void {
    this.wildcard = pair;
  }

  async close(): Promise<void> {
    this.routes = [];
  }

  /** One HTTP request for `host` on public `port`, routed as HAProxy would (tests). */
  async request(host: string, port: number): Promise<MemoryAnswer> {
    const name = normalizeHost(host);
    const route = this.routes.find((r) => r.port === port && name !== undefined && r.fqdns.includes(name));
    if (!route || !route.handlers.includes('http')) return { status: 404 };
    if (route.handlers.includes('redirect')) return { status: 301 };
    let backend = this.pick(route.groupId);
    if (!backend && (await this.o.onNoBackend?.(route.groupId))) backend = this.pick(route.groupId);
    if (!backend) return { status: 503 };
    const at = this.now();
    for (const c of [
      this.counter(this.groups, route.groupId, {}),
      this.counter(this.instances, backend, { groupId: route.groupId }),
    ]) {
      c.requests += 1;
      c.lastActivity = at;
    }
    this.o.onActivity?.(route.groupId, backend);
    return { status: 200, instanceId: backend };
  }

  /** The next running instance of the group, round robin. */
  private pick(groupId: string): string | undefined {
    const running = this.o.backends(groupId).filter((b) => b.state === 'running');
    if (running.length === 0) return undefined;
    const n = this.next.get(groupId) ?? 0;
    this.next.set(groupId, n + 1);
    return running[n % running.length]!.instanceId;
  }

  private counter<T extends Counter>(m: Map<string, T>, id: string, extra: Omit<T, keyof Counter>): T {
    let c = m.get(id);
    if (!c) m.set(id, (c = { ...counter(), ...extra } as T));
    return c;
  }
}
