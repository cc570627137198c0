import type { Logger } from 'pino';
import { availableParallelism } from 'node:os';
import { gatewayThreads } from './config.js';
import { HaproxyDataPlane } from './gateway/haproxy/plane.js';
import { MemoryDataPlane } from './gateway/memory.js';
import type { DataPlane, GatewayOptions } from './gateway/types.js';
import type { DriverFactory } from './machines/driver.js';
import { enableKsm } from './machines/ksm.js';
import { MemoryMachines } from './machines/memory.js';
import { probeAccel } from './machines/qemu/accel.js';
import { hostTscKhz } from './machines/qemu/argv.js';
import { QemuDriver } from './machines/qemu/driver.js';
import type { NetworkDriver } from './network/driver.js';
import { HostNetwork } from './network/host.js';
import { MemoryNetwork } from './network/memory.js';
import type { Services } from './services/index.js';
import type { VolumeDriver } from './volumes/driver.js';
import { Ext4Volumes } from './volumes/ext4.js';
import { MemoryVolumes } from './volumes/memory.js';

/**
 * The host work of the controllers goes through four drivers, each chosen by
 * name in the configuration (docs/architecture.md, "Drivers"): the real one
 * by default, and `memory` for unit tests and for running the API on a
 * machine without QEMU (instances "boot" at once and nothing is published).
 */
export interface Drivers {
  /** `machines.driver`: qemu | memory */
  machines: DriverFactory;
  /** `network.driver`: host | memory; undefined when `network.enabled` is false */
  network: NetworkDriver | undefined;
  /** `volumes.driver`: ext4 | memory */
  volumes: VolumeDriver;
  /** `gateway.driver`: haproxy | memory */
  dataPlane: (o: GatewayOptions) => DataPlane;
}

type Build<T> = (s: Services, log: Logger) => T;

const MACHINES: Record<string, Build<Promise<DriverFactory>>> = {
  qemu: qemuMachines,
  memory: async (s) => (onEvent) => new MemoryMachines(onEvent, () => s.clock.now()),
};

const NETWORKS: Record<string, Build<NetworkDriver>> = {
  host: (s) => new HostNetwork({ subnet: s.config.subnet, bridge: s.config.network.bridge, slot: s.hostSlot }),
  memory: (s) => new MemoryNetwork(s.config.subnet, s.hostSlot),
};

const VOLUMES: Record<string, Build<VolumeDriver>> = {
  ext4: (s) => new Ext4Volumes(s.paths.volumes),
  memory: () => new MemoryVolumes(),
};

const DATA_PLANES: Record<string, Build<(o: GatewayOptions) => DataPlane>> = {
  haproxy: (s) => (o) =>
    new HaproxyDataPlane({
      ...o,
      dataDir: s.config.dataDir,
      threads: gatewayThreads(s.config.gateway.threads, availableParallelism()),
      cpuWeight: s.config.gateway.cpuWeight,
      logErrors: s.config.gateway.logErrors,
    }),
  memory: (s) => (o) => new MemoryDataPlane(o, () => s.clock.now()),
};

/** The entry of `table` named `name`, or an error that names the setting and the choices. */
function choose<T>(setting: string, table: Record<string, T>, name: string): T {
  const f = Object.hasOwn(table, name) ? table[name] : undefined;
  if (f === undefined)
    throw new Error(`${setting} '${name}' is not a known driver (known: ${Object.keys(table).join(', ')})`);
  return f;
}

/**
 * Checks the driver names of the configuration: each must be known, and
 * machines, network (when enabled) and volumes are `memory` together or not
 * at all (a memory VM opens no tap and no disk; QEMU needs real ones). The
 * data plane combines with either.
 */
export function checkDriverNames(c: Services['config']): void {
  choose('machines.driver', MACHINES, c.machines.driver);
  choose('network.driver', NETWORKS, c.network.driver);
  choose('volumes.driver', VOLUMES, c.volumes.driver);
  choose('gateway.driver', DATA_PLANES, c.gateway.driver);
  const vm = c.machines.driver === 'memory';
  const others: [string, string][] = [['volumes.driver', c.volumes.driver]];
  if (c.network.enabled) others.unshift(['network.driver', c.network.driver]);
  for (const [setting, name] of others)
    if ((name === 'memory') !== vm)
      throw new Error(
        `${setting} '${name}' does not go with machines.driver '${c.machines.driver}': ` +
          `machines, network and volumes are 'memory' together or not at all`,
      );
}

/** The configured data plane alone (tests of the gateway controller that boot no VM). */
export function dataPlane(s: Services, log: Logger): (o: GatewayOptions) => DataPlane {
  return choose('gateway.driver', DATA_PLANES, s.config.gateway.driver)(s, log);
}

/** Builds the configured drivers (the QEMU driver probes KVM once when `accel` is `auto`). */
export async function buildDrivers(s: Services, log: Logger): Promise<Drivers> {
  const c = s.config;
  checkDriverNames(c);
  const memory = Object.entries({
    machines: c.machines.driver,
    network: c.network.driver,
    volumes: c.volumes.driver,
    gateway: c.gateway.driver,
  }).filter(([, name]) => name === 'memory');
  if (memory.length > 0)
    log.warn(
      { memory: memory.map(([k]) => k) },
      'in-memory drivers: nothing of these runs on the host (for tests and API development, docs/operations.md)',
    );
  return {
    machines: await choose('machines.driver', MACHINES, c.machines.driver)(s, log),
    network: c.network.enabled ? choose('network.driver', NETWORKS, c.network.driver)(s, log) : undefined,
    volumes: choose('volumes.driver', VOLUMES, c.volumes.driver)(s, log),
    dataPlane: dataPlane(s, log),
  };
}

/** QEMU, with the accelerator that really boots a guest here. */
async function qemuMachines(s: Services, log: Logger): Promise<DriverFactory> {
  const m = s.config.machines;
  const accel = await probeAccel(m.accel, { qemu: m.qemu, log: (msg) => log.info(msg) });
  log.info({ accel }, `machines: QEMU with ${accel.toUpperCase()}`);
  if (m.ksm) log.info({ ksm: enableKsm() }, 'machines: same-page merging (KSM) for guest memory');
  return (onEvent) =>
    new QemuDriver(
      {
        qemu: m.qemu,
        accel,
        tbSizeMb: m.tbSizeMb,
        tscKhz: hostTscKhz(),
        logDir: (id) => s.paths.instance(id),
        log: (o, msg) => log.warn(o, msg),
        warm: { dir: s.paths.warm, max: m.warmVms },
      },
      onEvent,
    );
}
