import type { Logger } from 'pino';
import type { Controller } from './reconcile/deps.js';
import { buildDrivers, type Drivers } from './drivers.js';
import { AutoscaleController } from './reconcile/autoscale.js';
import { MachineController } from './reconcile/machines.js';
import { GatewayController } from './reconcile/gateway.js';
import { NetworkController } from './reconcile/network.js';
import { CertificateController } from './reconcile/certificates.js';
import { VolumeController } from './reconcile/volumes.js';
import type { Services } from './services/index.js';

/**
 * The background controllers the daemon runs by default, over the drivers
 * the configuration names (src/drivers.ts); `drivers` replaces them (tests
 * that keep a handle on an in-memory driver).
 */
export async function defaultControllers(s: Services, log: Logger, drivers?: Drivers): Promise<Controller[]> {
  const d = drivers ?? (await buildDrivers(s, log));
  const network = d.network ? new NetworkController(s, log, d.network) : undefined;
  // The gateway ends drains early when an instance's last connection closes.
  // (the closure runs only once the controllers have started, after `machines` is initialized)
  const gateway = s.config.gateway.enabled
    ? new GatewayController(s, log, d.dataPlane, (id) => machines.kick(id))
    : undefined;
  const machines = new MachineController({
    network,
    volumes: d.volumes,
    connections: gateway ? (id) => gateway.connections(id) : undefined,
    beforeStop: gateway ? () => gateway.settled() : undefined,
    services: s,
    driver: d.machines,
    log,
    probePort: d.network ? (ip, port, signal) => d.network!.waitForPort(ip, port, signal) : undefined,
    bootTimeoutMs: s.config.machines.bootTimeoutMs,
    stopTimeoutMs: s.config.machines.stopTimeoutMs,
  });
  const autoscale = new AutoscaleController({
    services: s,
    log,
    cpuMs: (id) => machines.stats(id)?.cpuMs,
    traffic: gateway ? (groupId, id) => gateway.traffic(groupId, id) : undefined,
  });
  // Started in order: the network keeps adopted VMs' taps before the machines controller adopts them.
  const certs = gateway && s.config.acme.enabled ? [new CertificateController(s, log)] : [];
  return [
    new VolumeController(s, log, d.volumes),
    ...(network ? [network] : []),
    machines,
    ...(gateway ? [gateway] : []),
    ...certs,
    autoscale,
  ];
}
