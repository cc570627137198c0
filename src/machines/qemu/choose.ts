import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MachineSpec } from '../driver.js';
import { handoverOffset, unikraftCrash } from '../unikraft.js';
import { qemuArgv, runtimeFiles, type QemuOptions } from './argv.js';
import { confinedCommand, jailArgv, jailRoot, VM_UID_BASE } from './jail.js';
import { qemuVersion } from './snapshot.js';
import type { MachineChooser } from '../../images/boot-files.js';

/**
 * The uid of trial boots: just below the VMs' range, so a trial never
 * shares a uid with an instance's QEMU (a pushed kernel is a tenant's code).
 */
export const PROBE_UID = VM_UID_BASE - 1;

/** A machine/firmware pair a Unikraft kernel may boot on, fastest first (docs/machines.md). */
export interface BootChoice {
  machine: 'microvm' | 'pc';
  firmware: 'seabios' | 'qboot';
}

export const CANDIDATES: readonly BootChoice[] = [
  { machine: 'microvm', firmware: 'seabios' }, // microvm ignores `firmware`: it loads -kernel itself
  { machine: 'pc', firmware: 'qboot' },
  { machine: 'pc', firmware: 'seabios' }, // the safe default: every Unikraft build boots on it
];
export const SAFE_CHOICE = CANDIDATES[CANDIDATES.length - 1]!;

export interface TrialResult {
  choice: BootChoice;
  /** ms from spawn to the handover, per boot; null for a boot that did not hand over cleanly */
  boots: (number | null)[];
  /** why the first failed boot failed */
  failure?: string;
}

export interface ChooseOptions extends QemuOptions {
  qemu: string;
  memoryMb: number;
  /** boots per candidate; all must hand over for the candidate to count */
  boots?: number;
  /** per boot: no handover by then is a failure */
  timeoutMs?: number;
  /** after the handover, a crash within this window fails the boot */
  settleMs?: number;
  /** confine each trial like an instance's QEMU (own uid, chroot, seccomp, rlimits); the daemon does */
  confine?: boolean;
}

/**
 * One trial boot without a NIC or disks: resolves with the ms from spawn to
 * the handover, or a reason. The VM is always killed before it resolves.
 */
async function trial(kernel: string, choice: BootChoice, o: ChooseOptions): Promise<number | string> {
  const dir = mkdtempSync(join(tmpdir(), 'unihost-probe-'));
  const spec: MachineSpec = {
    id: `probe-${process.pid}`,
    dir,
    kernel,
    cmdline: '--',
    memoryMb: o.memoryMb,
    machine: choice.machine,
    firmware: choice.firmware,
    contract: 'unikraft',
    disks: [],
  };
  const f = runtimeFiles(dir);
  const t0 = performance.now();
  const argv = qemuArgv(spec, o);
  let cmd = [o.qemu, ...argv];
  if (o.confine) {
    mkdirSync(jailRoot(dir));
    cmd = confinedCommand(o.qemu, [...argv, ...jailArgv(dir, PROBE_UID)], o.memoryMb, []);
  }
  const child = spawn(cmd[0]!, cmd.slice(1), { stdio: 'ignore' });
  let exited: number | null | undefined;
  child.once('exit', (code) => (exited = code));
  child.once('error', () => (exited = -1));
  const read = (): string => {
    try {
      return readFileSync(f.serial, 'utf8');
    } catch {
      return '';
    }
  };
  try {
    let handover: number | null = null;
    const deadline = t0 + (o.timeoutMs ?? 5000);
    for (;;) {
      await new Promise((r) => setTimeout(r, 5));
      const text = read();
      const crash = unikraftCrash(text, handover !== null);
      if (crash) return `crashed: ${crash.line.trim()}`;
      if (handover === null && handoverOffset(text) >= 0) handover = performance.now() - t0;
      if (exited !== undefined) {
        // a halt after the handover (main returned: 83, or 0 without the exit device) is a good boot
        if (handover !== null && (exited === 83 || exited === 0)) return handover;
        return `QEMU exited ${exited}${handover === null ? ' before the handover' : ''}`;
      }
      if (handover !== null && performance.now() - t0 >= handover + (o.settleMs ?? 300)) return handover;
      if (performance.now() > deadline) return `no handover within ${o.timeoutMs ?? 5000} ms`;
    }
  } finally {
    if (exited === undefined) {
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Boots a Unikraft kernel on each candidate, `boots` times, and picks the
 * fastest median among the candidates whose every boot handed over cleanly;
 * the safe default when none did (a kernel that needs its NIC or disk to get
 * that far is then booted as any other).
 */
export async function chooseBoot(
  kernel: string,
  o: ChooseOptions,
): Promise<{ choice: BootChoice; trials: TrialResult[] }> {
  const trials: TrialResult[] = [];
  for (const choice of CANDIDATES) {
    const r: TrialResult = { choice, boots: [] };
    for (let i = 0; i < (o.boots ?? 3); i++) {
      const t = await trial(kernel, choice, o);
      r.boots.push(typeof t === 'number' ? Math.round(t) : null);
      if (typeof t === 'string') {
        r.failure = t;
        break;
      }
    }
    trials.push(r);
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const good = trials.filter((t) => t.failure === undefined);
  good.sort((a, b) => median(a.boots as number[]) - median(b.boots as number[]));
  return { choice: good[0]?.choice ?? SAFE_CHOICE, trials };
}

/**
 * This host's trial boots as the images layer asks for them
 * (`MachineChooser`): the daemon's driver and `image import` share it. `vmm`
 * is the QEMU build and accelerator, as snapshots are bound to them.
 */
export function qemuMachineChooser(o: {
  qemu: string;
  accel: QemuOptions['accel'];
  tbSizeMb: number;
  confine?: boolean;
}): MachineChooser {
  return {
    vmm: `${qemuVersion(o.qemu)}; ${o.accel}`,
    run: (kernel, memoryMb) =>
      chooseBoot(kernel, {
        qemu: o.qemu,
        accel: o.accel,
        tbSizeMb: o.tbSizeMb,
        tscKhz: 0,
        memoryMb,
        confine: o.confine !== false,
      }),
  };
}
