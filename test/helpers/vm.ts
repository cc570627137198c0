/**
 * Helpers of the real-QEMU tests: where the built test images are, and the
 * leak check that fails a suite which leaves a VM behind.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { rootOf } from '../../src/machines/qemu/procs.js';
import type { Harness } from './harness.js';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The test images `guest/build-images.sh` writes (the test command builds them first). */
export function guestOut(): string {
  const dir = process.env.UNIHOST_GUEST_OUT ?? join(ROOT, 'guest', 'out');
  if (!existsSync(join(dir, 'images.json')))
    throw new Error(`no test images in ${dir}: run guest/build-images.sh first`);
  return dir;
}

export interface Proc {
  pid: number;
  cmdline: string;
}

/** Running `qemu-system-*` processes whose command line mentions one of `marks` (data dirs, instance ids). */
/** QEMUs of this data dir waiting in its warm pool (src/machines/qemu/warm.ts): their jail is under `<dataDir>/warm/`. */
export function warmQemus(dataDir: string): Proc[] {
  const dir = join(dataDir, 'warm');
  if (!existsSync(dir)) return [];
  const real = realpathSync(dir);
  return qemuProcs([dataDir]).filter((p) => rootOf(p.pid)?.startsWith(`${real}/`));
}

/** QEMUs of this data dir that are instances' VMs (not waiting in the warm pool). */
export function instanceQemus(dataDir: string): Proc[] {
  const warm = new Set(warmQemus(dataDir).map((p) => p.pid));
  return qemuProcs([dataDir]).filter((p) => !warm.has(p.pid));
}

export function qemuProcs(marks: string[]): Proc[] {
  const out: Proc[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8').replaceAll('\0', ' ');
      // a zombie has an empty cmdline and is not running anything
      if (!/qemu-system-/.test(cmdline.split(' ')[0] ?? '')) continue;
      if (readFileSync(`/proc/${name}/stat`, 'utf8').split(') ')[1]?.startsWith('Z')) continue;
    } catch {
      continue; // exited meanwhile
    }
    if (marks.some((m) => m && cmdline.includes(m))) out.push({ pid: Number(name), cmdline });
  }
  return out;
}

/**
 * Kills every QEMU left behind by a suite and returns what it found; the
 * caller fails the suite when the list is not empty.
 */
export function killLeaks(marks: string[]): Proc[] {
  const left = qemuProcs(marks);
  for (const p of left) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      /* gone meanwhile */
    }
  }
  return left;
}

/** Polls `check` every `everyMs` until it returns a truthy value (for things without a change event). */
export async function poll<T>(
  what: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 60_000,
  everyMs = 200,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`${what}: not reached within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * The real Unikraft kernels (test data from outside the repository): the one
 * setting `UNIHOST_UNIKRAFT_DIR`, default `../shared/unikraft` beside the
 * repository. Undefined when absent: the tests that need them skip.
 */
export function unikraftDir(): string | undefined {
  const dir = process.env.UNIHOST_UNIKRAFT_DIR ?? join(ROOT, '..', 'shared', 'unikraft');
  return existsSync(join(dir, 'c-http_qemu-x86_64')) ? dir : undefined;
}

/**
 * The leak check of a VM suite: waits, killing nothing, until no QEMU of
 * `marks` (data dirs, instance ids) runs; one that still runs after `graceMs`
 * outlived its instance: it is killed only then (nothing may outlive the
 * run), and the check fails naming it.
 */
export async function assertNoVmLeft(marks: string[], graceMs = 20_000): Promise<void> {
  await poll('VMs gone', () => qemuProcs(marks).length === 0, graceMs).catch(() => undefined);
  const left = killLeaks(marks);
  assert.deepEqual(
    left.map((p) => `pid ${p.pid}: ${p.cmdline}`),
    [],
    'a VM outlived its instance: QEMU processes left behind (killed after this check)',
  );
}

/**
 * The end of a VM suite: deletes every instance of `tokens`' users, closes
 * the daemon, and fails when a QEMU was left behind (assertNoVmLeft),
 * a warm VM (machines/qemu/warm.ts) included.
 */
export async function closeVmHarness(h: Harness, tokens: string[]): Promise<void> {
  for (const t of tokens) {
    const list = await h.call('GET', '/v1/instances/list', t);
    for (const i of list.body?.data?.instances ?? []) await h.call('DELETE', `/v1/instances/${i.uuid}`, t);
  }
  const dataDir = h.dataDir;
  // after the close: VMs outlive a daemon, so a leak is still there, and the QEMUs the daemon keeps
  // started in advance for restores (warm VMs) end with it
  try {
    await h.close();
  } finally {
    await assertNoVmLeft([dataDir]);
  }
}

/** Imports Unikraft's c-http from `dir` as `ref` (0.16.3 boots on pc with SeaBIOS only: test/vm/unikraft.test.ts checks the choice). */
export async function importCHttp(
  images: { importKernel(ref: string, o: Record<string, unknown>): Promise<unknown> },
  dir: string,
  ref = 'c-http:latest',
): Promise<void> {
  await images.importKernel(ref, {
    kernel: join(dir, 'c-http_qemu-x86_64'),
    ports: [8080],
    machine: 'pc',
    firmware: 'seabios',
  });
}

/** `GET /` over a new TLS connection to 127.0.0.1:`port` for `fqdn` (a TCP-mode service): the whole answer as text. */
export function tlsGet(port: number, fqdn: string, ca: string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, servername: fqdn, ca });
    let text = '';
    s.once('secureConnect', () => s.write(`GET / HTTP/1.1\r\nHost: ${fqdn}\r\nConnection: close\r\n\r\n`));
    s.on('data', (d: Buffer) => (text += d.toString()));
    s.once('end', () => resolve(text));
    s.once('error', reject);
  });
}

/**
 * The argv of an agent process (`unihost serve --role agent`, or `roles`) on
 * `storeUrl`, its data dir and config file; `address`: its host address.
 */
export function agentArgv(o: {
  name: string;
  dir: string;
  storeUrl: string;
  config: string;
  roles?: string;
  address?: string;
}): string[] {
  return [
    '--import',
    'tsx',
    join(ROOT, 'src/cli/main.ts'),
    'serve',
    '--role',
    o.roles ?? 'agent',
    '--host-name',
    o.name,
    ...(o.address ? ['--host-address', o.address] : []),
    '--data-dir',
    o.dir,
    '--store',
    o.storeUrl,
    '--config',
    o.config,
  ];
}

/**
 * The CPU step policy of the autoscale runs with real guests (test/vm,
 * bench/wake): under TCG an idle guest measures ~40 millicores and a few
 * request loops ~350, so a loaded group gains a clone (≥ 200) and an idle
 * one loses it (< 100).
 */
export const GUEST_CPU_STEPS = {
  name: 'cpu',
  type: 'step',
  steps: [
    { upper_bound: 100, adjustment: -1 },
    { lower_bound: 100, upper_bound: 200, adjustment: 0 },
    { lower_bound: 200, adjustment: 1 },
  ],
};
