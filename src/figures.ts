/**
 * Live figures: what the host's agent and the gateway measure now (CPU and
 * memory of a VM, its tap's counters, open connections, traffic per group,
 * scaling decisions). They are not records: the API reads them through this
 * interface, never from controller objects. A process that measures them
 * (the agent and gateway roles) answers from its own controllers
 * (src/reconcile/figures.ts) and publishes them in the store every few
 * seconds; a process that does not (`--role api`) reads what was published.
 */
import type { Counter, Counters } from './gateway/types.js';
import type { Store } from './store/types.js';

/** Byte and packet counters of an instance's tap, seen from the guest. */
export interface NetCounters {
  rx_bytes: number;
  rx_packets: number;
  tx_bytes: number;
  tx_packets: number;
}

/** What is measured of one instance; a missing field is not measured (not zero). */
export interface InstanceFigures {
  /** CPU time of the VM's process, ms */
  cpuMs?: number;
  /** resident memory of the VM's process, bytes */
  rssBytes?: number;
  /** the autoscaler's recent CPU figure (docs/autoscale.md) */
  cpuMillicores?: number;
  net?: NetCounters;
  /** client connections the gateway holds open to it */
  connections?: number;
}

/** Scale-out and scale-in decisions per group id since the deciding process started. */
export type Decisions = Record<string, { out: number; in: number }>;

export interface LiveFigures {
  /** what is measured of instance `id` now ({} when nothing is) */
  instance(id: string): Promise<InstanceFigures>;
  /** the gateway's traffic counters, or undefined when no gateway measures them */
  gateway(): Promise<Counters | undefined>;
  /** autoscale decisions, or undefined when no autoscaler runs */
  decisions(): Promise<Decisions | undefined>;
}

/** A chunk of an instance's console log, with the spec's offsets (`GET /v1/instances/log`). */
export interface ConsoleChunk {
  output: Buffer;
  available: { start: number; end: number };
  range: { start: number; end: number };
}

/**
 * Where console output is read: the host that runs the instance keeps its
 * log (one host for now: the data dir's `instances/<uuid>/`). The API reads
 * it through this, never from a controller.
 */
export interface ConsoleReader {
  /** `hostId`: the host the instance is placed on, when the caller has its record (no store read then) */
  read(instanceId: string, offset: number, limit: number, hostId?: string | null): Promise<ConsoleChunk>;
}

/** What one process publishes in the store (`figures` table) for the others. */
/** What an agent says of its host (GET /v1/nodes). */
export interface HostFigures {
  id: string;
  /** the machine's cores and memory */
  vcpus: number;
  memory_mib: number;
  /** the budgets admission control applies to guests (src/services/capacity.ts) */
  guest_vcpus: number | null;
  guest_memory_mib: number;
  /** when this agent started */
  started_at: string;
}

export interface PublishedFigures {
  instances: Record<string, InstanceFigures>;
  host?: HostFigures;
  gateway?: Counters;
  decisions?: Decisions;
}

/** A process that measures nothing and reads nothing (tests, tools). */
export const NO_FIGURES: LiveFigures = {
  instance: async () => ({}),
  gateway: async () => undefined,
  decisions: async () => undefined,
};

/** How often measuring processes publish, and how old a publication may be before it is ignored. */
export const PUBLISH_MS = 5_000;
/** Figures older than this are not live: their publisher is gone (or its host is down). */
export const MAX_AGE_MS = 6 * PUBLISH_MS;

/**
 * The figures the measuring processes published (an API server without the
 * agent and gateway roles). Read at most once a second; publications older
 * than six periods (a process that stopped) are ignored.
 */
export class StoreFigures implements LiveFigures {
  private cache: { at: number; rows: PublishedFigures[] } | undefined;

  constructor(
    private readonly store: Pick<Store, 'read'>,
    private readonly now: () => number = Date.now,
  ) {}

  private async rows(): Promise<PublishedFigures[]> {
    const t = this.now();
    if (this.cache && t - this.cache.at < 1000) return this.cache.rows;
    const all = await this.store.read((tx) => tx.figures.list());
    const rows = all.filter((r) => t - Date.parse(r.at) <= MAX_AGE_MS).map((r) => r.data as PublishedFigures);
    this.cache = { at: t, rows };
    return rows;
  }

  async instance(id: string): Promise<InstanceFigures> {
    const out: InstanceFigures = {};
    for (const r of await this.rows()) Object.assign(out, r.instances[id]);
    return out;
  }

  async gateway(): Promise<Counters | undefined> {
    const parts = (await this.rows()).flatMap((r) => (r.gateway ? [r.gateway] : []));
    return parts.length === 0 ? undefined : mergeCounters(parts);
  }

  async decisions(): Promise<Decisions | undefined> {
    const parts = (await this.rows()).flatMap((r) => (r.decisions ? [r.decisions] : []));
    if (parts.length === 0) return undefined;
    const out: Decisions = {};
    for (const d of parts)
      for (const [g, n] of Object.entries(d)) {
        const cur = (out[g] ??= { out: 0, in: 0 });
        cur.out += n.out;
        cur.in += n.in;
      }
    return out;
  }
}

/** Several gateways' counters as one: counts summed, the last activity the latest. */
export function mergeCounters(parts: Counters[]): Counters {
  if (parts.length === 1) return parts[0]!;
  const out: Counters = { groups: {}, instances: {} };
  const add = <C extends Counter>(a: C | undefined, b: C): C =>
    a
      ? {
          ...a,
          openConnections: a.openConnections + b.openConnections,
          requests: a.requests + b.requests,
          bytesIn: a.bytesIn + b.bytesIn,
          bytesOut: a.bytesOut + b.bytesOut,
          lastActivity: Math.max(a.lastActivity, b.lastActivity),
        }
      : { ...b };
  for (const p of parts) {
    for (const [g, c] of Object.entries(p.groups)) out.groups[g] = add(out.groups[g], c);
    for (const [i, c] of Object.entries(p.instances)) out.instances[i] = add(out.instances[i], c);
  }
  return out;
}
