import type { Target } from '../domain/refs.js';
import { isLive } from '../domain/instance-states.js';
import type { UserRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { findInstance } from './lookup.js';

/**
 * GET /v1/instances/metrics: the figures the platform has for one instance.
 * CPU time and RSS of the VM's process while it is live (0 once stopped, as
 * the public service reports), boot and network-ready times from its last
 * boot, network counters of its tap and open connections through the
 * gateway when those exist (src/figures.ts). Figures the platform does not
 * measure (HTTP requests in flight, queued) are left out rather than
 * reported as 0.
 */
export async function instanceMetrics(deps: ServiceBase, user: UserRec, t: Target): Promise<Record<string, unknown>> {
  const i = await deps.store.read((tx) => findInstance(tx, user, t));
  const live = isLive(i.state);
  const f = await deps.figures.instance(i.id);
  const out: Record<string, unknown> = {
    uuid: i.id,
    name: i.name,
    state: i.state,
    rss_bytes: (live && f.rssBytes) || 0,
    cpu_time_ms: (live && f.cpuMs) || 0,
    boot_time_us: i.boot_time_us ?? 0,
    net_time_us: i.net_time_us ?? 0,
  };
  if (live && f.net) Object.assign(out, f.net);
  if (f.connections !== undefined) out.nconns = f.connections;
  return out;
}
