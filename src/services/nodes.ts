import { MAX_AGE_MS, type HostFigures, type PublishedFigures } from '../figures.js';
import { err } from '../errors.js';
import type { HostRec, UserRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { leaseHeld } from '../domain/hosts.js';

/**
 * The hosts of the platform in the control plane's `Node` model (GET
 * /v1/nodes): what a self-hosted platform can truthfully say of them. A
 * host's machine figures come from what its agent publishes every few
 * seconds (src/reconcile/figures.ts); a host whose agent has not published
 * lately is in state `error`, with the reason in `state_message`. Hosts are
 * the operator's: only developer (operator) accounts see them.
 */
export class NodeService {
  constructor(private readonly deps: ServiceBase) {}

  private allowed(user: UserRec): void {
    if (!user.developer)
      throw err(
        'UH_NOT_ALLOWED',
        "the 'nodes' endpoints show the platform's hosts: they are for developer (operator) accounts",
      );
  }

  async list(user: UserRec): Promise<Record<string, unknown>[]> {
    this.allowed(user);
    const { hosts, figures } = await this.deps.store.read(async (tx) => ({
      hosts: await tx.hosts.list(),
      figures: await tx.figures.list(),
    }));
    // the freshest report of each host
    const latest = new Map<string, { at: number; host: HostFigures }>();
    for (const f of figures) {
      const host = (f.data as PublishedFigures).host;
      const at = Date.parse(f.at);
      if (host && (latest.get(host.id)?.at ?? -Infinity) < at) latest.set(host.id, { at, host });
    }
    return hosts.map((h) => this.view(h, latest.get(h.id)));
  }

  async get(user: UserRec, id: string): Promise<Record<string, unknown>> {
    const node = (await this.list(user)).find((n) => n.uuid === id);
    if (!node) throw err('UH_NOT_FOUND', `No node with UUID '${id}'`);
    return node;
  }

  private view(h: HostRec, r: { at: number; host: HostFigures } | undefined): Record<string, unknown> {
    const now = this.deps.clock.now();
    const live = r !== undefined && now - r.at <= MAX_AGE_MS;
    const out: Record<string, unknown> = {
      uuid: h.id,
      name: h.name,
      created_at: h.created_at,
      state: live ? 'ready' : 'error',
      cloudprovider: 'manual',
      vcpus: r?.host.vcpus ?? 0,
      memory_mib: r?.host.memory_mib ?? 0,
      metro: this.deps.config.metro,
      uptime_seconds: live ? Math.max(0, Math.floor((now - Date.parse(r.host.started_at)) / 1000)) : 0,
      delete_lock: false,
    };
    if (r) {
      out.updated_at = new Date(r.at).toISOString();
      out.ready_at = r.host.started_at;
      out.guest_vcpus = r.host.guest_vcpus;
      out.guest_memory_mib = r.host.guest_memory_mib;
    }
    if (!live)
      out.state_message = r
        ? `its agent has not reported since ${new Date(r.at).toISOString()}`
        : 'its agent has not reported yet';
    // what an operator made of it, and its lease (docs/hosts.md)
    if (h.state === 'dead' || !leaseHeld(h)) {
      out.state = 'error';
      out.state_message = "its agent's lease ran out: the host is dead";
    } else if (h.state !== 'live') out.state_message = `the host is ${h.state}`;
    if (h.address) out.address = h.address;
    return out;
  }
}
