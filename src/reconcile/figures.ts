import type { Controller, ControllerDeps } from './deps.js';
import { isLive } from '../domain/instance-states.js';
import {
  PUBLISH_MS,
  type Decisions,
  type HostFigures,
  type InstanceFigures,
  type LiveFigures,
  type PublishedFigures,
} from '../figures.js';
import type { Counters } from '../gateway/types.js';
import type { NetCounters } from '../figures.js';

/** Where a process's own figures come from: its controllers, named one by one (src/controllers.ts). */
export interface FigureSources {
  /** CPU time and RSS of a VM's process (the machine controller) */
  vm?: (id: string) => { cpuMs: number; rssBytes: number } | undefined;
  /** the autoscaler's CPU figure */
  cpuMillicores?: (id: string) => number | undefined;
  /** the instance's tap counters */
  net?: (id: string) => NetCounters | undefined;
  /** open client connections through the gateway */
  connections?: (id: string) => number | undefined;
  gateway?: () => Counters;
  decisions?: () => Decisions;
  /** the agent's machine and guest budgets (GET /v1/nodes) */
  host?: (startedAt: string) => HostFigures;
}

/** The figures this process measures itself, at once (no store round trip). */
export class LocalFigures implements LiveFigures {
  constructor(private readonly src: FigureSources) {}

  /** Synchronous: what the publisher and `instance` read. */
  measure(id: string): InstanceFigures {
    const out: InstanceFigures = {};
    const vm = this.src.vm?.(id);
    if (vm) Object.assign(out, vm);
    const cpu = this.src.cpuMillicores?.(id);
    if (cpu !== undefined) out.cpuMillicores = cpu;
    const net = this.src.net?.(id);
    if (net) out.net = net;
    const conns = this.src.connections?.(id);
    if (conns !== undefined) out.connections = conns;
    return out;
  }

  host(startedAt: string): HostFigures | undefined {
    return this.src.host?.(startedAt);
  }

  async instance(id: string): Promise<InstanceFigures> {
    return this.measure(id);
  }

  async gateway(): Promise<Counters | undefined> {
    return this.src.gateway?.();
  }

  async decisions(): Promise<Decisions | undefined> {
    return this.src.decisions?.();
  }
}

/**
 * Publishes this process's figures in the store every few seconds
 * (`figures`, under `source`), for API servers that run elsewhere (`--role
 * api`); not announced on the change feed.
 */
export class FiguresPublisher implements Controller {
  private timer: NodeJS.Timeout | undefined;
  private busy = false;
  private readonly startedAt: string;

  constructor(
    private readonly s: ControllerDeps,
    private readonly local: LocalFigures,
    private readonly source: string,
    private readonly log: { warn(o: object, m: string): void },
  ) {
    this.startedAt = new Date(s.clock.now()).toISOString();
  }

  async start(): Promise<void> {
    await this.publish();
    this.timer = setInterval(() => void this.publish(), PUBLISH_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
  }

  private async publish(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const live = await this.s.store.read(async (tx) =>
        (await tx.instances.all()).filter(
          (i) => isLive(i.state) && i.state !== 'standby' && (!this.s.hostId || i.host_id === this.s.hostId),
        ),
      );
      const data: PublishedFigures = { instances: {} };
      const host = this.local.host(this.startedAt);
      if (host) data.host = host;
      for (const i of live) {
        const f = this.local.measure(i.id);
        if (Object.keys(f).length > 0) data.instances[i.id] = f;
      }
      const [gateway, decisions] = await Promise.all([this.local.gateway(), this.local.decisions()]);
      if (gateway) data.gateway = gateway;
      if (decisions) data.decisions = decisions;
      const at = new Date(this.s.clock.now()).toISOString();
      await this.s.store.tx((tx) => tx.figures.put(this.source, at, data));
    } catch (e) {
      this.log.warn({ err: e }, 'publishing live figures failed');
    } finally {
      this.busy = false;
    }
  }
}
