import { buildCmdline } from '../domain/cmdline.js';
import { imageBootFiles, type MachineChooser } from '../images/boot-files.js';
import { ImageLayout } from '../images/layout.js';
import { fetchImage } from '../images/share.js';
import { storeBlobs } from '../store/blob-share.js';
import {
  warmShape,
  type Contract,
  type MachineRuntime,
  type MachineSpec,
  type Shutdown,
  type WarmReservation,
  type WarmShape,
} from '../machines/driver.js';
import type { ControllerDeps } from './deps.js';
import type { GuestAddress, InstanceRec, Tx } from '../store/types.js';
import { macFor } from '../network/address.js';
import type { NetworkHooks } from './network.js';
import type { VolumeDriver } from '../volumes/driver.js';

/** What a boot needs: the driver's spec, the tap's set-up time, shutdown behaviour, readiness ports. */
export interface BootPlan {
  spec: MachineSpec;
  netUs: number | null;
  shutdown: Shutdown;
  readyPorts: number[];
  /** a restore whose snapshot was taken with every ready port accepting: running once resumed, not probed */
  readyAtResume: boolean;
  /** a restore whose guest has another address than the instance (a clone of a template): translated on its tap */
  guest?: GuestAddress;
  /** settles when the rules admit the tap: awaited after the VM is spawned, so QEMU's start covers it */
  admitted: Promise<void>;
}

/** The driver's runtime facts plus what the controller keeps beside them in `runtime`. */
export interface RuntimeRec extends MachineRuntime {
  contract: Contract;
  /** whether the kernel honours a shutdown request (image metadata) */
  shutdown?: Shutdown;
  /** TCP ports that must accept on the private IP before the instance is running */
  readyPorts?: number[];
  /** when the graceful stop request was sent (ms), for escalation */
  stopSentAt?: number;
  /** the machine type (a snapshot restores only into the same) */
  machine?: string;
  /** this boot restores a memory snapshot (machine-snapshots.ts) */
  restored?: boolean;
  /** a restore that is running once its guest resumes: its ready ports accepted in the snapshot (no probe) */
  readyAtResume?: boolean;
  /** the guest's own address and MAC when they are not the instance's (restored from a template): the tap translates */
  guest?: GuestAddress;
}

/** The address and MAC an instance's NIC has, or undefined without a private address. */
export function ownAddress(inst: InstanceRec): GuestAddress | undefined {
  if (!inst.private_ip || !inst.nic_id) return undefined;
  return { ip: inst.private_ip, mac: inst.mac ?? macFor(inst.nic_id) };
}

/** `guest` when it differs from the instance's own address (a clone's memory), else undefined. */
export function foreignGuest(inst: InstanceRec, guest: GuestAddress | undefined): GuestAddress | undefined {
  const own = ownAddress(inst);
  return guest && own && (guest.ip !== own.ip || guest.mac !== own.mac) ? guest : undefined;
}

/**
 * Plans the boot of `inst`: the image's boot files, the memory snapshot it
 * restores instead of booting (`restore`: its file, or null), its NIC (the
 * network attaches the tap, timed from `t0` with `now`; a restored guest
 * with another address than the instance keeps it, translated on the tap),
 * its volumes' images as disks and mounts, the kernel command line, and
 * the ports that mean ready.
 */
export async function bootPlan(
  s: ControllerDeps,
  {
    network,
    volumes: images,
    restore,
    chooser,
    warm,
  }: {
    network?: NetworkHooks;
    volumes: VolumeDriver;
    restore?: (inst: InstanceRec, dir: string, machine: string) => Promise<string | null>;
    /** this host's trial boots for a Unikraft kernel whose image names no machine */
    chooser?: MachineChooser;
    /** a VM started in advance for a restore of this shape (MachineDriver.reserveWarm) */
    warm?: {
      reserve(shape: WarmShape): Promise<WarmReservation | undefined>;
      release(id: string, broken?: boolean): void;
    };
  },
  inst: InstanceRec,
  t0: number,
  now: () => number,
): Promise<BootPlan> {
  // an image another host imported: its content comes from the shared store first (docs/hosts.md, "Images")
  if (s.store.kind === 'postgres') await fetchImage(new ImageLayout(s.paths.images), inst.image, storeBlobs(s.store));
  // a Unikraft kernel without a machine choice on this host waits for its trial boots (docs/machines.md)
  const img = await imageBootFiles(s.paths, inst.image, chooser);
  const dir = s.paths.instance(inst.id);
  const from = (await restore?.(inst, dir, img.machine)) ?? null;
  const guest = from ? foreignGuest(inst, inst.snapshot?.guest) : undefined;
  const volumes = await s.store.read((tx) => tx.volumes.forInstance(inst.id));
  // a restore with a NIC and no disks may take a VM started in advance, whose tap becomes the instance's
  const shape = warmShape({ ...img, memoryMb: inst.memory_mb });
  let reserved = from && network && volumes.length === 0 ? await warm?.reserve(shape) : undefined;
  try {
    return await planWithNic();
  } catch (e) {
    if (reserved) warm?.release(reserved.id);
    throw e;
  }

  async function attachNic(hooks: NetworkHooks) {
    const restored = !!from;
    if (!reserved) return hooks.attach(inst, { guest, restored });
    try {
      return await hooks.attach(inst, { guest, from: reserved.tap, restored });
    } catch {
      // its tap is gone (the VM ended): the restore starts a VMM of its own on the instance's tap
      warm?.release(reserved.id, true);
      reserved = undefined;
      return hooks.attach(inst, { guest, restored });
    }
  }

  async function planWithNic(): Promise<BootPlan> {
    const nic = network ? await attachNic(network) : undefined;
    const netUs = nic ? Math.max(0, Math.round((now() - t0) * 1000)) : null;
    const spec: MachineSpec = {
      id: inst.id,
      dir,
      kernel: img.kernel,
      initrd: img.initrd,
      cmdline: buildCmdline({
        kernelArgs: img.kernelArgs,
        // `<cidr>:<gw>:<dns0>:<dns1>:<hostname>` (Unikraft's and the test images' netdev.ip): a hostname set by PATCH
        netdevIp: nic && (inst.hostname ? `${nic.netdevIp}::${inst.hostname}` : nic.netdevIp),
        env: { ...img.env, ...inst.env },
        mounts: volumes.map((v, i) => ({ tag: `vol${i}`, at: v.at ?? '/data', readonly: v.readonly })),
        args: inst.args.length > 0 ? inst.args : img.args,
      }),
      memoryMb: inst.memory_mb,
      machine: img.machine,
      firmware: img.firmware,
      contract: img.contract,
      disks: volumes.map((v, i) => ({ path: images.path(v.id), tag: `vol${i}`, readonly: v.readonly })),
      ...(nic ? { nic: { tap: nic.tap, mac: nic.mac } } : {}),
      ...(from ? { restore: from } : {}),
      ...(reserved ? { warm: reserved.id } : {}),
    };
    const readyPorts = nic ? await readyPortsOf(s, inst, img.ports) : [];
    const listening = new Set(inst.snapshot?.listening ?? []);
    return {
      spec,
      netUs,
      shutdown: img.shutdown,
      readyPorts,
      readyAtResume: !!from && readyPorts.every((p) => listening.has(p)),
      admitted: nic?.admitted ?? Promise.resolve(),
      ...(guest ? { guest } : {}),
    };
  }
}

/**
 * Ports whose opening makes the instance running: the destination ports of
 * its service group, else the ports its image declares (docs/machines.md).
 */
async function readyPortsOf(s: ControllerDeps, inst: InstanceRec, imagePorts: number[]): Promise<number[]> {
  if (!inst.service_group_id) return imagePorts;
  const g = await s.store.read((tx) => tx.groups.getAnyUser(inst.service_group_id!));
  // a `redirect` service answers at the gateway and never reaches the instance
  const forwarded = (g?.services ?? []).filter((sv) => !sv.handlers.includes('redirect'));
  const ports = new Set(forwarded.map((sv) => sv.destination_port));
  return ports.size > 0 ? [...ports].sort((a, b) => a - b) : imagePorts;
}

/**
 * Records a VM the driver has just started: its runtime facts (what a
 * restarted daemon needs to adopt it), the boot's first timings, and its
 * volumes as `mounted`. The boot marks of the previous boot are cleared.
 */
export async function recordBootInTx(
  tx: Tx,
  inst: InstanceRec,
  rt: MachineRuntime,
  plan: BootPlan,
  t0: number,
): Promise<void> {
  // Deleted while the VMM was spawning: the reconcile of the deletion kills it; its volumes
  // (detached, left `mounted` by the delete) are released then, never marked here.
  if (!(await tx.instances.getAny(inst.id))) return;
  await tx.instances.updateStatus(inst.id, {
    runtime: {
      ...rt,
      contract: plan.spec.contract,
      shutdown: plan.shutdown,
      readyPorts: plan.readyPorts,
      machine: plan.spec.machine,
      ...(plan.spec.restore ? { restored: true } : {}),
      ...(plan.readyAtResume ? { readyAtResume: true } : {}),
      ...(plan.guest ? { guest: plan.guest } : {}),
    } satisfies RuntimeRec,
    start_count: inst.start_count + 1,
    started_at: new Date(rt.spawnedAt).toISOString(),
    vmm_start_time_us: Math.max(0, (rt.spawnedAt - t0) * 1000),
    net_time_us: plan.netUs,
    vmm_load_time_us: null,
    vmm_ready_time_us: null,
    boot_time_us: null,
    stop_reason: null,
    exit_code: null,
    stop_code: null,
  });
  for (const v of await tx.volumes.forInstance(inst.id))
    if (v.state === 'idle') await tx.volumes.update(v.id, { state: 'mounted' });
}
