import type { Logger } from 'pino';
import type { Controller } from './reconcile/deps.js';
import { registerDriver, type DriverFactory } from './machines/driver.js';
import { enableKsm } from './machines/ksm.js';
import { probeAccel } from './machines/qemu/accel.js';
import { hostTscKhz } from './machines/qemu/argv.js';
import { QemuDriver } from './machines/qemu/driver.js';
import { AutoscaleController } from './reconcile/autoscale.js';
import { MachineController } from './reconcile/machines.js';
import { GatewayController } from './reconcile/gateway.js';
import { NetworkController } from './reconcile/network.js';
import { CertificateController } from './reconcile/certificates.js';
import { waitForPort } from './network/probe.js';
import { VolumeController } from './reconcile/volumes.js';
import type { Services } from './services/index.js';

/** Builds the configured machine driver; probes KVM once when `accel` is `auto`. */
export async function machineDriver(s: Services, log: Logger): Promise<DriverFactory> {
  const m = s.config.machines;
  if (m.driver !== 'qemu') throw new Error(`unknown machine driver '${m.driver}' (known: qemu)`);
  const accel = await probeAccel(m.accel, { qemu: m.qemu, log: (msg) => log.info(msg) });
  log.info({ accel }, `machines: QEMU with ${accel.toUpperCase()}`);
  if (m.ksm) log.info({ ksm: enableKsm() }, 'machines: same-page merging (KSM) for guest memory');
  const factory: DriverFactory = (onEvent) =>
    new QemuDriver(
      {
        qemu: m.qemu,
        accel,
        tbSizeMb: m.tbSizeMb,
        tscKhz: hostTscKhz(),
        logDir: (id) => s.paths.instance(id),
        log: (o, msg) => log.warn(o, msg),
      },
      onEvent,
    );
  registerDriver('qemu', factory);
  return factory;
}

/** The background controllers the daemon runs by default. */
export async function defaultControllers(s: Services, log: Logger): Promise<Controller[]> {
  const network = s.config.network.enabled ? new NetworkController(s, log) : undefined;
  // The gateway ends drains early when an instance's last connection closes.
  // (the closure runs only once the controllers have started, after `machines` is initialized)
  const gateway = s.config.gateway.enabled ? new GatewayController(s, log, (id) => machines.kick(id)) : undefined;
  const machines = new MachineController({
    network,
    connections: gateway ? (id) => gateway.connections(id) : undefined,
    beforeStop: gateway ? () => gateway.settled() : undefined,
    services: s,
    driver: await machineDriver(s, log),
    log,
    probePort: network ? (ip, port, signal) => waitForPort(ip, port, signal) : undefined,
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
    new VolumeController(s, log),
    ...(network ? [network] : []),
    machines,
    ...(gateway ? [gateway] : []),
    ...certs,
    autoscale,
  ];
}
