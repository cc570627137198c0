/**
 * bench/boot: boot latency of the platform against raw QEMU, side by side in one run.
 *
 *   npx tsx bench/boot.ts [--runs 10] [--image echo:latest] [--parallel 6] [--only linux|unikraft]
 *
 * Linux test image: (a) raw `qemu-system-x86_64` (the same command line the
 * driver uses) from spawn to the guest's READY line; (b) `POST /v1/instances`
 * with autostart and `wait_timeout_ms: -1`, request to response; (c) `PUT
 * start` of a stopped instance with `wait_timeout_ms: -1`. Also QEMU RSS of a
 * running 128 MB guest and instances created and started per minute (a batch
 * of --parallel instances). Unikraft kernels (UNIHOST_UNIKRAFT_DIR, default
 * ../shared/unikraft): see bench/boot-unikraft.ts. Needs root and the test
 * images (guest/build-images.sh); runs itself inside a network namespace it
 * creates and deletes (the Unikraft part boots guests with NICs).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { DEFAULTS } from '../src/config.js';
import { defaultControllers } from '../src/controllers.js';
import { startDaemon } from '../src/daemon.js';
import { buildCmdline } from '../src/domain/cmdline.js';
import { imageBootFiles } from '../src/images/boot-files.js';
import { importGuestImages } from '../src/images/guest.js';
import { hostTscKhz, qemuArgv, runtimeFiles } from '../src/machines/qemu/argv.js';
import { processStats } from '../src/machines/stats.js';
import { runFileInNewNetns } from '../test/helpers/netns.js';
import { apiCaller, fmt, stats, unikraftSection } from './boot-unikraft.js';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '10' },
    image: { type: 'string', default: 'echo:latest' },
    parallel: { type: 'string', default: '6' },
    only: { type: 'string' },
    'uk-batch': { type: 'string', default: '10' },
  },
});
const RUNS = Number(values.runs);

async function linuxSection(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'unihost-bench-boot-'));
  const logger = pino({ level: 'warn' });
  const d = await startDaemon(
    {
      ...DEFAULTS,
      dataDir,
      listen: '127.0.0.1:0',
      machines: { ...DEFAULTS.machines, accel: 'tcg' },
      network: { ...DEFAULTS.network, enabled: false },
    },
    { logger, controllers: defaultControllers },
  );
  const cleanup: string[] = [];
  try {
    await importGuestImages(d.services.images, 'guest/out');
    const { token } = await d.services.users.create('bench', true);
    const call = apiCaller(d.url, token);

    // (a) raw QEMU with the driver's command line
    const img = await d.store.read(async (tx) => (await tx.images.tag(values.image!))!.digest);
    const boot = await imageBootFiles(d.services.paths, img);
    const raw: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'unihost-raw-'));
      cleanup.push(dir);
      const argv = qemuArgv(
        {
          id: `raw-${i}`,
          dir,
          kernel: boot.kernel,
          initrd: boot.initrd,
          cmdline: buildCmdline({ kernelArgs: boot.kernelArgs, env: boot.env, mounts: [], args: boot.args }),
          memoryMb: 128,
          machine: boot.machine,
          contract: 'unihost',
          disks: [],
        },
        { accel: 'tcg', tbSizeMb: DEFAULTS.machines.tbSizeMb, tscKhz: hostTscKhz() },
      );
      const t0 = performance.now();
      const p = spawn(DEFAULTS.machines.qemu, argv, { stdio: 'ignore' });
      const ctl = runtimeFiles(dir).control;
      await new Promise<void>((resolve, reject) => {
        const iv = setInterval(() => {
          if (existsSync(ctl) && readFileSync(ctl, 'utf8').includes('UNIHOST READY')) {
            clearInterval(iv);
            resolve();
          }
        }, 2);
        p.once('exit', () => reject(new Error('raw QEMU exited before READY')));
      });
      raw.push(performance.now() - t0);
      p.kill('SIGKILL');
      await new Promise((r) => p.once('exit', r));
    }

    // (b) POST /v1/instances with autostart and wait -1, then (c) start of the stopped instance
    const create: number[] = [];
    const start: number[] = [];
    let rss = 0;
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      const r = await call('POST', '/v1/instances', {
        image: values.image,
        name: `b-${i}`,
        autostart: true,
        wait_timeout_ms: -1,
      });
      create.push(performance.now() - t0);
      if (r.data.instances![0]!.state !== 'running')
        throw new Error(`create did not reach running: ${JSON.stringify(r)}`);
      if (i === 0) {
        const inst = await d.store.read(async (tx) => (await tx.instances.all()).find((x) => x.name === 'b-0')!);
        rss = processStats((inst.runtime as { pid: number }).pid)?.rssBytes ?? 0;
      }
      await call('PUT', '/v1/instances/stop', { name: `b-${i}` });
      await call('GET', '/v1/instances/wait', { name: `b-${i}`, state: 'stopped', timeout_ms: -1 });
      const t1 = performance.now();
      const s = await call('PUT', '/v1/instances/start', { name: `b-${i}`, wait_timeout_ms: -1 });
      start.push(performance.now() - t1);
      if (s.data.instances![0]!.state !== 'running')
        throw new Error(`start did not reach running: ${JSON.stringify(s)}`);
      await call('DELETE', '/v1/instances', { name: `b-${i}` });
    }

    // throughput: a batch created and started together
    const n = Number(values.parallel);
    const t0 = performance.now();
    const batch = await call(
      'POST',
      '/v1/instances',
      Array.from({ length: n }, (_, k) => ({
        image: values.image,
        name: `t-${k}`,
        autostart: true,
        wait_timeout_ms: -1,
      })),
    );
    const secs = (performance.now() - t0) / 1000;
    const ok = batch.data.instances!.filter((e) => e.state === 'running').length;
    await call(
      'DELETE',
      '/v1/instances',
      Array.from({ length: n }, (_, k) => ({ name: `t-${k}` })),
    );

    const ra = stats(raw).median;
    const rb = stats(create).median;
    console.log(`# image ${values.image}, 128 MB guests, TCG, ${RUNS} runs each`);
    console.log(`(a) raw QEMU spawn -> READY        ${fmt(raw)}`);
    console.log(`(b) POST /v1/instances (wait -1)   ${fmt(create)}`);
    console.log(`(c) PUT start (wait -1)            ${fmt(start)}`);
    console.log(
      `ratio (b)/(a) median ${(rb / ra).toFixed(3)}; platform overhead ${(rb - ra).toFixed(0)} ms (goal: <= max(5%, 20 ms))`,
    );
    console.log(`QEMU RSS of a running 128 MB guest: ${(rss / 2 ** 20).toFixed(0)} MiB`);
    console.log(
      `throughput: ${ok}/${n} instances created and running in ${secs.toFixed(1)} s = ${((ok / secs) * 60).toFixed(1)} per minute`,
    );
  } finally {
    await d.close();
    for (const p of cleanup) rmSync(p, { recursive: true, force: true });
    // VMs outlive the daemon by design: kill any a failed run left (their kernel path is in dataDir).
    spawn('pkill', ['-KILL', '-f', dataDir]).once('exit', () => rmSync(dataDir, { recursive: true, force: true }));
  }
}

async function inner(): Promise<void> {
  if (values.only !== 'unikraft') await linuxSection();
  const uk = process.env.UNIHOST_UNIKRAFT_DIR ?? join('..', 'shared', 'unikraft');
  if (values.only === 'linux') return;
  if (!existsSync(join(uk, 'c-http_qemu-x86_64'))) {
    console.log(`\n# Unikraft kernels: none in ${uk} (set UNIHOST_UNIKRAFT_DIR); skipped`);
    return;
  }
  await unikraftSection(uk, RUNS, Number(values['uk-batch']));
}

/** Re-runs this file inside a fresh network namespace and deletes it afterwards. */
function outer(): number {
  const r = runFileInNewNetns(import.meta.url, {
    prefix: 'uhbench',
    args: process.argv.slice(2),
    env: { UH_BENCH_NETNS: '1' },
    stdio: 'inherit',
  });
  return r.status ?? 1;
}

if (process.env.UH_BENCH_NETNS) await inner();
else process.exitCode = outer();
