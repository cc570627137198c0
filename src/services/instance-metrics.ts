import { readFileSync } from 'node:fs';
import type { Target } from '../domain/refs.js';
import { isLive } from '../domain/instance-states.js';
import { tapName } from '../network/host.js';
import type { UserRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { findInstance } from './lookup.js';
import { controllerWith } from './controller-access.js';

/** What the machine controller offers (src/reconcile/machines.ts): CPU time and RSS of a VM's process. */
interface MachineStats {
  stats(id: string): { cpuMs: number; rssBytes: number } | undefined;
}

/** What the gateway controller offers: open connections to an instance. */
interface ConnectionCount {
  connections(id: string): number | undefined;
}

/**
 * Byte and packet counters of the instance's tap, seen from the guest: what
 * the tap transmits the guest received. Undefined without a tap (network
 * disabled, VM not up).
 */
export function tapCounters(
  instanceId: string,
  sysNet = '/sys/class/net',
): { rx_bytes: number; rx_packets: number; tx_bytes: number; tx_packets: number } | undefined {
  const dir = `${sysNet}/${tapName(instanceId)}/statistics`;
  try {
    const read = (f: string) => Number(readFileSync(`${dir}/${f}`, 'utf8').trim());
    return {
      rx_bytes: read('tx_bytes'),
      rx_packets: read('tx_packets'),
      tx_bytes: read('rx_bytes'),
      tx_packets: read('rx_packets'),
    };
  } catch {
    return undefined;
  }
}

/**
 * GET /v1/instances/metrics: the figures the platform has for one instance.
 * CPU time and RSS of the VM's process while it is live (0 once stopped, as
 * the public service reports), boot and network-ready times from its last
 * boot, network counters of its tap and open connections through the
 * gateway when those exist. Figures the platform does not measure (HTTP
 * requests in flight, queued) are left out rather than reported as 0.
 */
export async function instanceMetrics(deps: ServiceBase, user: UserRec, t: Target): Promise<Record<string, unknown>> {
  const i = await deps.store.read((tx) => findInstance(tx, user, t));
  const live = isLive(i.state);
  const vm = live ? controllerWith<MachineStats>(deps, 'stats')?.stats(i.id) : undefined;
  const out: Record<string, unknown> = {
    uuid: i.id,
    name: i.name,
    state: i.state,
    rss_bytes: vm?.rssBytes ?? 0,
    cpu_time_ms: vm?.cpuMs ?? 0,
    boot_time_us: i.boot_time_us ?? 0,
    net_time_us: i.net_time_us ?? 0,
  };
  const net = live ? tapCounters(i.id) : undefined;
  if (net) Object.assign(out, net);
  const conns = controllerWith<ConnectionCount>(deps, 'connections')?.connections(i.id);
  if (conns !== undefined) out.nconns = conns;
  return out;
}
