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
 * Medians and p95; the goal is (b) − (a) <= 20 ms at the median. Needs root;
 * runs itself inside a network namespace it creates and deletes.
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
import { startDaemon } from '../src/daemon.js';
import type { GatewayController } from '../src/reconcile/gateway.js';
import { runFileInNewNetns } from '../test/helpers/netns.js';
import { apiCaller, fmt, stats } from './boot-unikraft.js';
import { portOpen, RAW_IP, RawQemu } from './raw-qemu.js';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '10' } } });
const RUNS = Number(values.runs);
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
    const gwc = d.services.controllers!.find((c) => 'waker' in (c as object)) as GatewayController;
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
    const port = gwc.gateway!.boundPort(443)!;
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
  } finally {
    raw?.close();
    await d.close();
    // VMs outlive the daemon by design: kill any this run left (their files are under dataDir).
    spawn('pkill', ['-KILL', '-f', dataDir]).once('exit', () => rmSync(dataDir, { recursive: true, force: true }));
  }
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
