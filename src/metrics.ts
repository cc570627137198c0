import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Counters } from './gateway/types.js';
import type { InstanceState, Store } from './store/types.js';
import { NO_FIGURES, type LiveFigures } from './figures.js';

const STATES: InstanceState[] = [
  'stopped',
  'starting',
  'running',
  'draining',
  'stopping',
  'standby',
  'template',
  'checkpoint',
];

/**
 * The daemon's Prometheus metrics (`GET /metrics`). One registry per daemon,
 * not prom-client's global one, so several daemons in one process (tests)
 * keep their figures apart.
 */
export class DaemonMetrics {
  readonly registry = new Registry();
  private readonly requests: Histogram<'method' | 'route' | 'status'>;
  private readonly boots: Histogram;
  /** start_count of the last boot observed per instance, so each boot is counted once */
  private readonly seenBoots = new Map<string, number>();
  private off: (() => void) | undefined;

  constructor(
    private readonly store: Store,
    figures: LiveFigures = NO_FIGURES,
  ) {
    // the process's own (prom-client's defaults): RSS, descriptors, CPU, event loop lag, V8's heap by space,
    // GC pauses; what an operator watches for a leak (docs/operations.md, "Memory"). The event loop's lag
    // keeps prom-client's 10 ms sampling: each scrape resets it, and a scrape within the first sample's
    // interval after the last one reads NaN (at 100 ms, the API tests' quick scrapes did).
    collectDefaultMetrics({ register: this.registry });
    const gateway = () => figures.gateway();
    const autoscale = () => figures.decisions();
    this.gatewayMetrics(gateway);
    const decisions = new Counter({
      name: 'unihost_autoscale_decisions_total',
      help: 'Autoscale scaling decisions per service group (label `group`: its UUID) and direction (out, in).',
      labelNames: ['group', 'direction'],
      registers: [this.registry],
      collect: async () => {
        decisions.reset();
        for (const [group, n] of Object.entries((await autoscale()) ?? {})) {
          decisions.inc({ group, direction: 'out' }, n.out);
          decisions.inc({ group, direction: 'in' }, n.in);
        }
      },
    });
    this.requests = new Histogram({
      name: 'unihost_api_request_duration_seconds',
      help: 'API request latency by route (the path pattern), method and HTTP status.',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [this.registry],
    });
    this.boots = new Histogram({
      name: 'unihost_instance_boot_seconds',
      help: 'Instance boot time (start of the VM to the guest signalling ready), per boot since the daemon started.',
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: [this.registry],
    });
    const byState = new Gauge({
      name: 'unihost_instances',
      help: 'Instances by state.',
      labelNames: ['state'],
      registers: [this.registry],
      // Read at scrape time from the store: the store is the truth, no counter can drift.
      collect: async () => {
        const counts = new Map<string, number>(STATES.map((s) => [s, 0]));
        for (const i of await store.read((tx) => tx.instances.all()))
          counts.set(i.state, (counts.get(i.state) ?? 0) + 1);
        for (const [state, n] of counts) byState.set({ state }, n);
      },
    });
    const snapshots = new Gauge({
      name: 'unihost_snapshot_bytes',
      help: 'Disk used by memory snapshots of instances (stateful standby, suspend), and how many there are.',
      labelNames: ['what'],
      registers: [this.registry],
      collect: async () => {
        let bytes = 0;
        let count = 0;
        for (const i of await store.read((tx) => tx.instances.all()))
          if (i.snapshot) {
            bytes += i.snapshot.bytes;
            count++;
          }
        snapshots.set({ what: 'bytes' }, bytes);
        snapshots.set({ what: 'count' }, count);
      },
    });
  }

  /**
   * Gateway traffic per service group (label `group`: its UUID), read from
   * the gateway's own counters at scrape time. They count since the daemon
   * started; a deleted group's series go once its last connection closed.
   */
  private gatewayMetrics(counters: () => Promise<Counters | undefined>): void {
    const registers = [this.registry];
    const labelNames = ['group'] as const;
    const requests = new Counter({
      name: 'unihost_gateway_requests_total',
      help: 'Requests (HTTP) and connections (TCP/TLS) the gateway routed, per service group.',
      labelNames,
      registers,
      collect: async () => {
        requests.reset();
        for (const [group, c] of Object.entries((await counters())?.groups ?? {})) requests.inc({ group }, c.requests);
      },
    });
    const open = new Gauge({
      name: 'unihost_gateway_open_connections',
      help: 'Client connections the gateway holds open now, per service group.',
      labelNames,
      registers,
      collect: async () => {
        open.reset();
        for (const [group, c] of Object.entries((await counters())?.groups ?? {}))
          open.set({ group }, c.openConnections);
      },
    });
    const bytes = new Counter({
      name: 'unihost_gateway_bytes_total',
      help: 'Bytes through the gateway per service group: in = from clients, out = to clients.',
      labelNames: ['group', 'direction'],
      registers,
      collect: async () => {
        bytes.reset();
        for (const [group, c] of Object.entries((await counters())?.groups ?? {})) {
          bytes.inc({ group, direction: 'in' }, c.bytesIn);
          bytes.inc({ group, direction: 'out' }, c.bytesOut);
        }
      },
    });
  }

  /** Starts observing boots; boots that happened before the daemon started are not counted. */
  async start(): Promise<void> {
    for (const i of await this.store.read((tx) => tx.instances.all())) this.seenBoots.set(i.id, i.start_count);
    this.off = this.store.watch('now', (e) => {
      if (e.type === 'change' && e.kind === 'instance') void this.onInstance(e.id);
    });
  }

  stop(): void {
    this.off?.();
  }

  private async onInstance(id: string): Promise<void> {
    const i = await this.store.read((tx) => tx.instances.getAny(id)).catch(() => undefined);
    if (!i) {
      this.seenBoots.delete(id);
      return;
    }
    if (i.state !== 'running' || i.boot_time_us === null) return;
    if ((this.seenBoots.get(id) ?? 0) >= i.start_count) return;
    this.seenBoots.set(id, i.start_count);
    this.boots.observe(i.boot_time_us / 1e6);
  }

  /** Records one API request; `route` is the matched path pattern (bounded cardinality). */
  observeRequest(method: string, route: string, status: number, seconds: number): void {
    this.requests.observe({ method, route, status: String(status) }, seconds);
  }

  /** The text exposition format and its content type. */
  async render(): Promise<{ contentType: string; body: string }> {
    // prom-client writes a NaN sample (the event loop lag's mean before its first sample) as `Nan`; the text
    // format's spelling is `NaN`, which strict parsers require
    const body = (await this.registry.metrics()).replace(/ Nan$/gm, ' NaN');
    return { contentType: this.registry.contentType, body };
  }
}
