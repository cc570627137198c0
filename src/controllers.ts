import type { Logger } from 'pino';
import type { Controller } from './reconcile/deps.js';
import { buildDrivers, type Drivers } from './drivers.js';
import { AutoscaleController } from './reconcile/autoscale.js';
import { MachineController } from './reconcile/machines.js';
import { GatewayController } from './reconcile/gateway.js';
import { NetworkController } from './reconcile/network.js';
import { CertificateController } from './reconcile/certificates.js';
import { VolumeController } from './reconcile/volumes.js';
import { FiguresPublisher, LocalFigures } from './reconcile/figures.js';
import { hostFigures } from './services/capacity.js';
import { tapCounters } from './network/counters.js';
import type { Services } from './services/index.js';
import { StoreFigures } from './figures.js';

/**
 * The background controllers of this process's roles (docs/operations.md,
 * "Roles"), over the drivers the configuration names (src/drivers.ts);
 * `drivers` replaces them (tests that keep a handle on an in-memory
 * driver). The agent role runs this host's VMs, taps, volumes and DNS, and
 * the autoscaler that reads their CPU; the gateway role runs the data plane
 * and the certificates it serves. Their live figures become the services'
 * (`s.figures`) and are published in the store for API servers elsewhere.
 */
export async function defaultControllers(s: Services, log: Logger, drivers?: Drivers): Promise<Controller[]> {
  const agentRole = s.config.roles.includes('agent');
  const gatewayRole = s.config.roles.includes('gateway') && s.config.gateway.enabled;
  if (!agentRole && !gatewayRole) return [];
  const d = drivers ?? (await buildDrivers(s, log));
  const network = agentRole && d.network ? new NetworkController(s, log, d.network) : undefined;
  // The gateway ends drains early when an instance's last connection closes.
  // (the closure runs only once the controllers have started, after `machines` is initialized)
  const gateway = gatewayRole ? new GatewayController(s, log, d.dataPlane, (id) => machines?.kick(id)) : undefined;
  const machines = agentRole
    ? new MachineController({
        network,
        volumes: d.volumes,
        connections: gateway ? (id) => gateway.connections(id) : undefined,
        beforeStop: gateway ? (id) => gateway.leave(id) : undefined,
        services: s,
        driver: d.machines,
        log,
        probePort: d.network ? (ip, port, signal) => d.network!.waitForPort(ip, port, signal) : undefined,
        lease: s.lease,
        bootTimeoutMs: s.config.machines.bootTimeoutMs,
        stopTimeoutMs: s.config.machines.stopTimeoutMs,
      })
    : undefined;
  const autoscale = machines
    ? new AutoscaleController({
        services: s,
        log,
        cpuMs: (id) => machines.stats(id)?.cpuMs,
        vms: () => machines.vms(),
        traffic: gateway ? (groupId, id) => gateway.traffic(groupId, id) : undefined,
        remoteCpu: s.hostId ? remoteCpu(new StoreFigures(s.store, () => s.clock.now())) : undefined,
      })
    : undefined;
  const local = new LocalFigures({
    vm: machines && ((id) => machines.stats(id)),
    cpuMillicores: autoscale && ((id) => autoscale.cpuMillicores(id)),
    net: network && tapCounters,
    connections: gateway && ((id) => gateway.connections(id)),
    gateway: gateway && (() => gateway.dataPlane!.counters()),
    decisions: autoscale && (() => autoscale.decisionCounts()),
    host: s.hostId ? (at) => hostFigures(s.config.capacity, s.hostId, at) : undefined,
  });
  s.figures = local;
  if (gateway) s.gateway = { whenRouted: (g, ms) => gateway.whenRouted(g, ms) };
  // Started in order: the network keeps adopted VMs' taps before the machines controller adopts them.
  const certs = gateway && s.config.acme.enabled ? [new CertificateController(s, log)] : [];
  return [
    ...(agentRole ? [new VolumeController(s, log, d.volumes)] : []),
    ...(network ? [network] : []),
    ...(machines ? [machines] : []),
    ...(gateway ? [gateway] : []),
    ...certs,
    ...(autoscale ? [autoscale] : []),
    new FiguresPublisher(s, local, `${s.config.roles.join(',')}@${s.config.host.name}`, log),
  ];
}

/** The CPU figures other hosts' agents published for `ids` (read at most once a second: StoreFigures). */
function remoteCpu(figures: StoreFigures): (ids: string[]) => Promise<Map<string, number>> {
  return async (ids) => {
    const out = new Map<string, number>();
    for (const id of ids) {
      const m = (await figures.instance(id)).cpuMillicores;
      if (m !== undefined) out.set(id, m);
    }
    return out;
  };
}
