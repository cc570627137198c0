/**
 * bench/wake: scale-to-zero wake latency against raw QEMU, side by side in one run.
 *
 *   npx tsx bench/wake.ts [--runs 10]
 *
 * With Unikraft's c-http (UNIHOST_UNIKRAFT_DIR, default ../shared/unikraft;
 * 16 MB, TCG), per cycle:
 *   (a) raw `qemu-system-x86_64` (the driver's command line) from spawn until
 *       port 8080 accepts on the guest's IP;
 *   (b) an HTTPS request through the gateway (new connection, TLS, SNI) to a
 *       group whose master is in standby, until the response headers arrive
 *       (the wake: hold, start, readiness probe, forward);
 *   (c) the same request to the now running instance.
 * Medians and p95; the goal is (b) − (a) <= 20 ms at the median.
 *
 * Then the autoscale reaction (--scale-runs, default 3): a Linux `http`
 * master (step policy: cpu >= 200 millicores → +1, < 100 → −1, max 2) is
 * loaded with request loops through the gateway; from the load's start:
 * the scale-out decision (the clone's record appears), the clone `running`
 * (its port accepts), and the clone serving (the gateway's counters show a
 * request routed to it). Between runs the load stops and the clone is
 * drained and deleted.
 *
 * Needs root and the test images (guest/build-images.sh); runs itself
 * inside a network namespace it creates and deletes.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { Agent, request } from 'undici';
import { DEFAULTS } from '../src/config.js';
import { defaultControllers } from '../src/controllers.js';
import { startDaemon, type Daemon } from '../src/daemon.js';
import { importGuestImages } from '../src/images/guest.js';
import type { GatewayController } from '../src/reconcile/gateway.js';
import { runFileInNewNetns } from '../test/helpers/netns.js';
import { apiCaller, fmt, stats } from './boot-unikraft.js';
import { portOpen, RAW_IP, RawQemu } from './raw-qemu.js';

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '10' }, 'scale-runs': { type: 'string', default: '3' } },
});
const RUNS = Number(values.runs);
const SCALE_RUNS = Number(values['scale-runs']);
const UK = process.env.UNIHOST_UNIKRAFT_DIR ?? join('..', 'shared', 'unikraft');

async function inner(): Promise<void> {
  const kernel = join(UK, 'c-http_qemu-x86_64');
  if (!existsSync(kernel)) {
    console.log(`# bench/wake: no c-http kernel in ${UK} (set UNIHOST_UNIKRAFT_DIR); skipped`);
    return;
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'unihost-bench-wake-'));
  const d = await startDaemon(
    {
      ...DEFAULTS,
      dataDir,
      listen: '127.0.0.1:0',
      subnet: '10.79.0.0/24',
      machines: { ...DEFAULTS.machines, accel: 'tcg' },
      network: { ...DEFAULTS.network, enabled: true, bridge: 'uhbr0', dns: false },
      gateway: { ...DEFAULTS.gateway, enabled: true, listen: '127.0.0.1', portOffset: 0 },
      acme: { ...DEFAULTS.acme, enabled: false },
    },
    { logger: pino({ level: 'warn' }), controllers: defaultControllers },
  );
  let raw: RawQemu | undefined;
  try {
    // c-http 0.16.3 boots on pc with SeaBIOS only (test/vm/unikraft.test.ts checks the choice)
    await d.services.images.importKernel('c-http:latest', {
      kernel,
      ports: [8080],
      machine: 'pc',
      firmware: 'seabios',
    });
    const { token } = await d.services.users.create('bench', true);
    const call = apiCaller(d.url, token);
    const gwc = d.controllers.find((c) => 'waker' in (c as object)) as GatewayController;
    const ca = readFileSync(gwc.ca!.caPath, 'utf8');
    const created = await call('POST', '/v1/instances', {
      name: 'sleepy',
      image: 'c-http:latest',
      memory_mb: 16,
      service_group: { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] },
      scale_to_zero: { policy: 'on', cooldown_time_ms: 300 },
      autostart: true,
      wait_timeout_ms: -1,
    });
    const e = created.data.instances![0]!;
    if (e.state !== 'running') throw new Error(`c-http did not start: ${JSON.stringify(created)}`);
    const fqdn = (e.service_group as { domains: { fqdn: string }[] }).domains[0]!.fqdn;
    const port = gwc.dataPlane!.boundPort(443)!;
    /** A request on a new TLS connection through the gateway; ms until the response headers. */
    const firstByte = async (): Promise<number> => {
      const agent = new Agent({ connect: { ca, servername: fqdn } });
      try {
        const t0 = performance.now();
        const r = await request(`https://127.0.0.1:${port}/`, {
          headers: { host: fqdn },
          dispatcher: agent,
          headersTimeout: 30_000,
        });
        const ms = performance.now() - t0;
        const body = await r.body.text();
        if (r.statusCode !== 200) throw new Error(`gateway answered ${r.statusCode}: ${body}`);
        return ms;
      } finally {
        await agent.close();
      }
    };
    const state = async () => (await call('GET', '/v1/instances', { name: 'sleepy' })).data.instances![0]!.state;
    const standby = async (): Promise<void> => {
      const end = Date.now() + 60_000;
      while ((await state()) !== 'standby') {
        if (Date.now() > end) throw new Error('never reached standby');
        await new Promise((r) => setTimeout(r, 50));
      }
    };

    raw = new RawQemu(d);
    const a: number[] = [];
    const b: number[] = [];
    const c: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      a.push(await raw.time('c-http:latest', () => portOpen(RAW_IP, 8080)));
      await standby();
      b.push(await firstByte());
      c.push(await firstByte());
    }
    const starts = (await call('GET', '/v1/instances', { name: 'sleepy' })).data.instances![0]!.start_count;
    console.log(`# bench/wake: c-http (${UK}), 16 MB, TCG, ${RUNS} cycles; the master started ${starts} times`);
    console.log(`(a) raw QEMU spawn -> port 8080 accepts             ${fmt(a)}`);
    console.log(`(b) first byte through the gateway from standby      ${fmt(b)}`);
    console.log(`(c) first byte through the gateway, instance running ${fmt(c)}`);
    const over = stats(b).median - stats(a).median;
    console.log(
      `(b) - (a) at the median: ${over.toFixed(0)} ms (goal <= 20 ms); the wake itself, (b) - (c): ${(stats(b).median - stats(c).median).toFixed(0)} ms`,
    );
    if (SCALE_RUNS > 0) await autoscaleReaction(d, call, gwc, ca);
  } finally {
    raw?.close();
    await d.close();
    // VMs outlive the daemon by design: kill any this run left (their files are under dataDir).
    spawn('pkill', ['-KILL', '-f', dataDir]).once('exit', () => rmSync(dataDir, { recursive: true, force: true }));
  }
}

/** Load start → scale-out decision → clone running → clone serving, for a loaded Linux `http` master. */
async function autoscaleReaction(
  d: Daemon,
  call: ReturnType<typeof apiCaller>,
  gwc: GatewayController,
  ca: string,
): Promise<void> {
  await importGuestImages(d.services.images, process.env.UNIHOST_GUEST_OUT ?? 'guest/out');
  await call('POST', '/v1/services', {
    name: 'busy',
    services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
  });
  const created = await call('POST', '/v1/instances', {
    name: 'busy',
    image: 'http:latest',
    service_group: { name: 'busy' },
    autostart: true,
    wait_timeout_ms: -1,
  });
  if (created.status !== 'success') throw new Error(`http master: ${JSON.stringify(created)}`);
  const master = created.data.instances![0]!;
  if (master.state !== 'running') throw new Error(`http master did not start: ${JSON.stringify(created)}`);
  const fqdn = (master.service_group as { domains: { fqdn: string }[] }).domains[0]!.fqdn;
  const groupId = (await d.store.read((tx) => tx.instances.getAny(String(master.uuid))))!.service_group_id;
  const conf = await call('POST', '/v1/services/autoscale', {
    name: 'busy',
    master: { uuid: master.uuid },
    min_size: 1,
    max_size: 2,
    warmup_time_ms: 1000,
    cooldown_time_ms: 2000,
    policies: [
      {
        name: 'cpu',
        type: 'step',
        steps: [
          { upper_bound: 100, adjustment: -1 },
          { lower_bound: 100, upper_bound: 200, adjustment: 0 },
          { lower_bound: 200, adjustment: 1 },
        ],
      },
    ],
  });
  if (conf.status !== 'success') throw new Error(`autoscale: ${JSON.stringify(conf)}`);
  const port = gwc.dataPlane!.boundPort(443)!;
  const agent = new Agent({ connect: { ca, servername: fqdn }, connections: 8 });
  const members = async () =>
    d.store.read(async (tx) => (await tx.instances.all()).filter((i) => i.service_group_id === groupId));
  const decision: number[] = [];
  const running: number[] = [];
  const serving: number[] = [];
  try {
    for (let run = 0; run < SCALE_RUNS; run++) {
      let loading = true;
      const t0 = performance.now();
      let served = 0;
      let failed = '';
      const loops = Array.from({ length: 6 }, async () => {
        while (loading) {
          try {
            const r = await request(`https://127.0.0.1:${port}/`, { headers: { host: fqdn }, dispatcher: agent });
            await r.body.text();
            if (r.statusCode === 200) served++;
            else failed = `HTTP ${r.statusCode}`;
          } catch (e) {
            failed = (e as Error).message;
            await new Promise((r) => setTimeout(r, 20));
          }
        }
      });
      let tDecision = 0;
      let tRunning = 0;
      let tServing = 0;
      const end = performance.now() + Number(process.env.UH_SCALE_WAIT_MS ?? 120_000);
      while (!tServing && performance.now() < end) {
        const clone = (await members()).find((i) => i.id !== master.uuid && i.desired === 'running');
        const now = performance.now() - t0;
        if (clone && !tDecision) tDecision = now;
        if (clone?.state === 'running' && !tRunning) tRunning = now;
        if (clone && (gwc.dataPlane!.counters().instances[clone.id]?.requests ?? 0) > 0) tServing = now;
        await new Promise((r) => setTimeout(r, 20));
      }
      loading = false;
      await Promise.all(loops);
      if (!tServing) {
        const cpu = (await call('GET', '/v1/instances', { uuid: master.uuid })).data.instances![0]!.cpu_millicores;
        throw new Error(
          `run ${run + 1}: no clone served within 120 s of load (${JSON.stringify((await members()).map((i) => [i.name, i.state, i.desired]))}, ${served} requests served, last failure: ${failed || 'none'}, master cpu ${String(cpu)} millicores)`,
        );
      }
      decision.push(tDecision);
      running.push(tRunning || tServing);
      serving.push(tServing);
      // back to the master alone before the next run
      const until = performance.now() + 120_000;
      while ((await members()).length > 1 && performance.now() < until) await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await agent.close();
  }
  const med = (xs: number[]) => stats(xs).median;
  console.log(`\n# autoscale reaction: Linux http master, 6 request loops through the gateway, ${SCALE_RUNS} runs`);
  console.log(`load start -> scale-out decision (clone created) ${fmt(decision)}`);
  console.log(`load start -> clone running (port accepts)       ${fmt(running)}`);
  console.log(`load start -> clone serving through the gateway  ${fmt(serving)}`);
  console.log(
    `parts at the median: detection ${med(decision).toFixed(0)} ms (1 s sampling, 3 s CPU window, warmup), boot ${(med(running) - med(decision)).toFixed(0)} ms, routed ${(med(serving) - med(running)).toFixed(0)} ms`,
  );
}

/** Re-runs this file inside a fresh network namespace and deletes it afterwards. */
function outer(): number {
  const r = runFileInNewNetns(import.meta.url, {
    prefix: 'uhwake',
    args: process.argv.slice(2),
    env: { UH_BENCH_NETNS: '1' },
    stdio: 'inherit',
  });
  return r.status ?? 1;
}

if (process.env.UH_BENCH_NETNS) await inner();
else process.exitCode = outer();
