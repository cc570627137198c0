import type { MachineChooser } from '../images/boot-files.js';
/**
 * The narrow interface between the machine controller and a VMM. A driver
 * boots, stops and kills VMs and reports what it observes; it never touches
 * the store. Drivers are chosen by name in the configuration
 * (`machines.driver`, src/drivers.ts): `qemu` (qemu/driver.ts) or `memory`
 * (memory.ts); a Firecracker driver would sit beside them.
 */
export type Machine = 'microvm' | 'pc';

/** How the guest reports to the host (docs/guest-contract.md). */
export type Contract = 'unihost' | 'unikraft';

/** Whether the kernel honours a shutdown request (ACPI power button). */
export type Shutdown = 'acpi' | 'none';

export interface Disk {
  path: string;
  /** the `vfs.fstab` tag; also the virtio-blk serial */
  tag: string;
  readonly: boolean;
}

export interface MachineSpec {
  /** instance id */
  id: string;
  /** per-instance runtime directory (sockets, control channel, raw console) */
  dir: string;
  kernel: string;
  initrd?: string;
  /** full kernel command line: image args, platform args, `--`, app args */
  cmdline: string;
  memoryMb: number;
  machine: Machine;
  /** firmware of machine `pc`; microvm always uses QEMU's own */
  firmware?: 'seabios' | 'qboot';
  contract: Contract;
  nic?: { tap: string; mac: string };
  disks: Disk[];
  /**
   * Boot from this memory snapshot (written by `snapshot`) instead of the
   * kernel: the guest resumes where it was paused. The rest of the spec
   * must be what it was when the snapshot was taken.
   */
  restore?: string;
  /**
   * Adoption of the VM of a running instance: if it is paused (a daemon
   * killed while it took a checkpoint, which pauses the VM for the write),
   * it runs on; a VM that runs already is left as it is.
   */
  resumePaused?: boolean;
  /**
   * Restore into this VM started in advance (`MachineDriver.reserveWarm`)
   * instead of starting one: `restore` and `nic` must be set, and `nic.tap`
   * must be the reservation's tap, renamed (its QEMU holds it open).
   */
  warm?: string;
}

/** A VM started in advance, reserved for a restore (`MachineDriver.reserveWarm`). */
export interface WarmReservation {
  id: string;
  /**
   * the tap its QEMU opened at its start (down, on no bridge): the network
   * makes it the instance's tap (`NetworkDriver.attachTap`'s `from`)
   */
  tap: string;
}

/** What a VM started in advance must share with the snapshot it restores (all but the NIC and the command line). */
export type WarmShape = Pick<MachineSpec, 'kernel' | 'initrd' | 'memoryMb' | 'machine' | 'firmware' | 'contract'>;

/** The warm shape's fields of `s` (optional ones only when set). */
export function warmShape(s: WarmShape): WarmShape {
  return {
    kernel: s.kernel,
    ...(s.initrd ? { initrd: s.initrd } : {}),
    memoryMb: s.memoryMb,
    machine: s.machine,
    ...(s.firmware ? { firmware: s.firmware } : {}),
    contract: s.contract,
  };
}

/** What the daemon persists to adopt a running VM after a restart. */
export interface MachineRuntime {
  pid: number;
  /** ms since the epoch when the VMM process was spawned */
  spawnedAt: number;
  accel: string;
}

/** Parsed control channel of one boot (docs/guest-contract.md §2). */
export interface ControlState {
  init: boolean;
  ready: boolean;
  stop: boolean;
  shutdown: boolean;
  exit: number | null;
  killed: boolean;
  signal: number | null;
  oom: boolean;
  errno: number | null;
}

export type MachineEvent =
  /** the VMM is up and its control socket answers */
  | { type: 'loaded'; at: number }
  /** the guest kernel handed over to init */
  | { type: 'init'; at: number }
  /** the application is about to start (the boot time mark) */
  | { type: 'ready'; at: number }
  /** the VM is gone; `status` is the VMM's exit status when known */
  | {
      type: 'exit';
      at: number;
      status: number | null;
      panicked: boolean;
      control: ControlState;
      /** the VMM's last error output */
      stderr: string;
      /** console output of this boot (the tail, for crash causes) */
      console: string;
    };

export interface MachineDriver {
  readonly name: string;
  /**
   * Boots a VM. Resolves once the VMM process runs; events for it go to the
   * listener given at construction. Call only when no VM of `spec.id` runs.
   */
  start(spec: MachineSpec): Promise<MachineRuntime>;
  /** Re-attaches to a VM started by an earlier daemon. Resolves false when it is gone. */
  adopt(spec: MachineSpec, rt: MachineRuntime): Promise<boolean>;
  /** Asks the guest to shut down (repeats the request until the guest reacts). */
  stop(id: string): Promise<void>;
  /**
   * Pauses the VM and writes its memory and device state to `path` (whole
   * or not at all); the VM stays paused (its disks flushed) until the caller,
   * having recorded the snapshot, ends it with `kill`: an exit seen before
   * the record would be taken for a stop without one. Rejects, with the VM
   * running on, when no snapshot could be written.
   */
  snapshot?(id: string, path: string): Promise<{ bytes: number }>;
  /** Pauses the VM with its disks drained and flushed (a consistent copy of its volumes can be taken); `resume` lets it run on. */
  pause?(id: string): Promise<void>;
  /** Lets a VM paused by `snapshot` or `pause` run on (a checkpoint: the instance keeps running). */
  resume?(id: string): Promise<void>;
  /** What a snapshot is bound to besides the spec (the VMM's build and accelerator): restored only into the same. */
  readonly snapshotVersion?: string;
  /**
   * Chooses the machine of a Unikraft kernel by trial boots on this host
   * (docs/machines.md, "Choosing the machine"); absent where nothing boots.
   */
  machineChooser?(): MachineChooser;
  /**
   * A VM started in advance for a restore of this shape (docs/snapshots.md,
   * "Warm restores"), reserved for the next `start` that names it in
   * `spec.warm`, with its NIC plugged on a tap of its own. Undefined when none
   * is ready (one still starting is waited for, briefly): the restore starts
   * its own VMM.
   */
  reserveWarm?(shape: WarmShape): Promise<WarmReservation | undefined>;
  /** Gives back a reservation whose `start` did not happen; `broken`: it cannot serve (its tap is gone), it ends. */
  releaseWarm?(id: string, broken?: boolean): void;
  /** Ends the VM at once (no clean shutdown). */
  kill(id: string): Promise<void>;
  /** Kills the VM if it runs and removes its runtime files. */
  delete(id: string, dir: string): Promise<void>;
  /** Whether a VM of `id` is known to this driver and running. */
  inspect(id: string): { running: boolean; pid: number | null };
  /** The instance ids of the VMs this driver tracks that run. */
  list(): string[];
  /** CPU time and memory of the VM's process, for accounting and autoscale. */
  stats(id: string): { cpuMs: number; rssBytes: number } | undefined;
  /**
   * VMs of this data dir running on the host, tracked or not (read from the
   * OS: a daemon killed between spawning a VM and storing its pid, or
   * between a delete and the kill, leaves VMs nothing tracks).
   */
  scan?(instancesDir: string): { id: string; pid: number }[];
  /** Ends a VM found by `scan` that is not tracked; resolves whether it is gone. */
  killStray?(pid: number): Promise<boolean>;
  /** Stops watching every VM (the VMs keep running). */
  close(): Promise<void>;
}

/** Builds a driver that reports its VMs' events to `onEvent` (src/drivers.ts chooses one from config). */
export type DriverFactory = (onEvent: (id: string, ev: MachineEvent) => void) => MachineDriver;
