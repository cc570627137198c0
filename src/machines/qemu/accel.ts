import { spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export type Accel = 'kvm' | 'tcg';
export type AccelMode = 'auto' | Accel;

export interface AccelOptions {
  /** QEMU binary (default `qemu-system-x86_64`). */
  qemu?: string;
  log?: (msg: string) => void;
  /** Probe boot timeout (default 5 s); QEMU is killed when it expires. */
  timeoutMs?: number;
  /** The KVM device to check before probing (default `/dev/kvm`; tests with a fake QEMU give a file of their own). */
  kvmDevice?: string;
}

export interface ProbeResult {
  ok: boolean;
  /** Why the boot did (not) work, for logs and error messages. */
  reason: string;
  /** Wall time from spawn to QEMU's exit (or the kill). */
  ms: number;
}

/** The probe kernel writes this byte to isa-debug-exit; QEMU then exits with (0x31 << 1) | 1. */
const EXIT_BYTE = 0x31;
export const PROBE_EXIT_STATUS = (EXIT_BYTE << 1) | 1; // 99
const DEBUG_EXIT_PORT = 0x501;
const LOAD_ADDR = 0x100000; // 1 MiB, where Multiboot loaders put a.out-kludge kernels
const HEADER_SIZE = 32; // 8 dwords: magic, flags, checksum, 5 addresses
const FILE_SIZE = 4096; // zero padding so QEMU's bzImage "HdrS" check at 0x202 reads defined bytes

/**
 * The probe guest's code (src/machines/qemu/probe-kernel.S, assembled at
 * 0x100020): from the Multiboot entry in 32-bit protected mode it does what a
 * Unikraft kernel does first (long mode, then the FPU and SSE with an
 * `ldmxcsr` through a 32-bit address) and only then writes EXIT_BYTE to
 * isa-debug-exit. A paravirtual /dev/kvm (kvm_pvm) ran a probe that only
 * wrote the byte in 1.5 s on one host, under the slowness bound, and then
 * every Unikraft kernel failed under it ("INTERNAL_ERROR in batch emul" at
 * that `ldmxcsr`): the probe must do what real guests do.
 */
const PROBE_CODE = Buffer.from(
  'fabf0010100031c0b9000c0000f3abc7050010100003201000c7050020100003301000c7050030100083000000b8001010000f22d80f20e083c8200f22e0b9800000c00f320d000100000f300f20c00d010000800f22c00f0115c0001000ea8500100008000f20c783cf220f22c7dbe30f20e781cf000600000f22e7bbc6001000670fae13b03166ba0105eefaf4ebfd0000000000000000ffff0000009aaf000f00b0001000801f0000',
  'hex',
);

/**
 * A Multiboot v1 kernel using the a.out kludge (flags bit 16), so no ELF
 * headers are needed: QEMU loads the file at 1 MiB and jumps to the code
 * right after the header, PROBE_CODE.
 */
export function probeKernel(): Buffer {
  const magic = 0x1badb002;
  const flags = 0x00010000;
  const end = LOAD_ADDR + FILE_SIZE;
  const header = [magic, flags, -(magic + flags) >>> 0, LOAD_ADDR, LOAD_ADDR, end, end, LOAD_ADDR + HEADER_SIZE];
  const buf = Buffer.alloc(FILE_SIZE);
  header.forEach((v, i) => buf.writeUInt32LE(v, i * 4));
  PROBE_CODE.copy(buf, HEADER_SIZE);
  return buf;
}

/**
 * Boots the probe kernel under `accel` and reports whether QEMU exited with
 * the probe's status. A guest that wedges (e.g. `KVM internal error`, after
 * which QEMU pauses the guest and keeps running) is killed at the timeout.
 */
export async function bootProbe(accel: Accel, opts: AccelOptions = {}): Promise<ProbeResult> {
  const dir = await mkdtemp(join(tmpdir(), 'unihost-accel-'));
  try {
    const kernel = join(dir, 'probe.bin');
    await writeFile(kernel, probeKernel());
    return await runProbe(opts.qemu ?? 'qemu-system-x86_64', accel, kernel, opts.timeoutMs ?? 5000);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function probeArgs(accel: Accel, kernel: string): string[] {
  // `-cpu host` aborts on paravirtual KVM (kvm_pvm: "failed to set MSR 0x10a"); qemu64 exists everywhere.
  return [
    ...['-M', 'pc', '-accel', accel, '-cpu', 'qemu64', '-m', '16'],
    ...['-nodefaults', '-no-user-config', '-nographic', '-no-reboot', '-kernel', kernel],
    ...['-device', `isa-debug-exit,iobase=0x${DEBUG_EXIT_PORT.toString(16)},iosize=2`],
  ];
}

function runProbe(qemu: string, accel: Accel, kernel: string, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const started = Date.now();
    const done = (ok: boolean, reason: string) => resolve({ ok, reason, ms: Date.now() - started });
    const child = spawn(qemu, probeArgs(accel, kernel), { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    let timedOut = false;
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d: string) => {
      if (stderr.length < 4096) stderr += d;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      done(false, `cannot run ${qemu}: ${e.message}`);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const detail = telling(stderr);
      if (code === PROBE_EXIT_STATUS) done(true, `probe guest booted under ${accel} in ${Date.now() - started} ms`);
      else if (timedOut) done(false, `probe guest did not finish under ${accel} within ${timeoutMs} ms${detail}`);
      else done(false, `QEMU exited with ${code ?? signal}${detail}`);
    });
  });
}

/** The stderr line that best explains a failure: an error over a CPUID warning. */
function telling(stderr: string): string {
  const lines = stderr
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  const line = lines.find((l) => /error/i.test(l)) ?? lines.find((l) => !/warning/i.test(l)) ?? lines[0];
  return line ? ` (${line})` : '';
}

async function kvmAccessible(device = '/dev/kvm'): Promise<boolean> {
  try {
    await access(device, constants.R_OK | constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

// Probe once per process and QEMU binary: the answer does not change while we run.
const kvmProbes = new Map<string, Promise<ProbeResult>>();

function probeKvmOnce(opts: AccelOptions): Promise<ProbeResult> {
  const key = opts.qemu ?? 'qemu-system-x86_64';
  let p = kvmProbes.get(key);
  if (!p) {
    p = probeKvm(opts);
    kvmProbes.set(key, p);
  }
  return p;
}

/**
 * KVM is usable when the probe guest boots under it and not far slower than
 * under TCG. The speed check matters: a paravirtual /dev/kvm (kvm_pvm)
 * boots the probe only by emulating it (~50x slower than TCG here), and real
 * guests then die with `KVM internal error`. Stopping at the slowness bound
 * also keeps the probe short on such hosts.
 */
async function probeKvm(opts: AccelOptions): Promise<ProbeResult> {
  const device = opts.kvmDevice ?? '/dev/kvm';
  if (!(await kvmAccessible(device))) return { ok: false, reason: `${device} is missing or not accessible`, ms: 0 };
  const timeoutMs = opts.timeoutMs ?? 5000;
  const tcg = await bootProbe('tcg', { ...opts, timeoutMs });
  const bound = tcg.ok ? Math.min(timeoutMs, slowBound(tcg.ms)) : timeoutMs;
  const kvm = await bootProbe('kvm', { ...opts, timeoutMs: bound });
  if (!tcg.ok || kvm.ok) return kvm;
  return { ...kvm, reason: `${kvm.reason}; the same guest boots under TCG in ${tcg.ms} ms` };
}

/** KVM slower than this (given TCG's time for the same guest) is emulation, not virtualization. */
export function slowBound(tcgMs: number): number {
  return Math.max(1500, 3 * tcgMs);
}

/** Forgets cached probe results (tests only). */
export function resetAccelCache(): void {
  kvmProbes.clear();
}

/**
 * Chooses the accelerator. `tcg`: no probe. `kvm`: throws unless a probe
 * guest really boots under KVM. `auto`: KVM only if the probe boot works
 * (a `/dev/kvm` can exist and still not run guests, e.g. paravirtual
 * kvm_pvm), else TCG. Call at daemon start; the probe costs one short QEMU run.
 */
export async function probeAccel(mode: AccelMode, opts: AccelOptions = {}): Promise<Accel> {
  const log = opts.log ?? (() => {});
  if (mode === 'tcg') {
    log('accel: tcg (configured)');
    return 'tcg';
  }
  const probe = await probeKvmOnce(opts);
  if (mode === 'kvm') {
    if (!probe.ok) throw new Error(`KVM requested but unusable: ${probe.reason}`);
    log(`accel: kvm (configured; ${probe.reason})`);
    return 'kvm';
  }
  log(probe.ok ? `accel: kvm (${probe.reason})` : `accel: tcg (KVM unusable: ${probe.reason})`);
  return probe.ok ? 'kvm' : 'tcg';
}
