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
 *   (c) the same request to the now running instance;
 *   (d) as (b) to a second master with stateful scale-to-zero (its memory
 *       kept in a snapshot, restored on the wake: docs/snapshots.md);
 *   (e) its restore: the start decision to the guest resumed;
 *   (f) a clone of a c-http template (docs/snapshots.md, "Templates"): from
 *       the create call (a new service group, autostart) to the first byte
 *       of an HTTPS request through the gateway to it; then it is deleted;
 *   (g) the same for a plain create from the image (a cold boot), for scale.
 * Medians and p95; goals: (b) − (a) <= 20 ms at the median; (d) <= 0.35x (a)
 * and (e) <= 30 ms in every cycle; (f) <= 0.5x (a); the snapshot <= 1.5x
 * the guest memory touched (non-zero pages of a raw c-http's RAM, read with
 * QMP pmemsave).
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
import { execFileSync, spawn } from 'node:child_process';
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
import { qemuProcs, GUEST_CPU_STEPS } from '../test/helpers/vm.js';
import { apiCaller, fmt, stats } from './boot-unikraft.js';
import { portOpen, RAW_IP, RawQemu } from './raw-qemu.js';
import { QmpClient } from '../src/machines/qemu/qmp.js';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '10' },
    'scale-runs': { type: 'string', default: '3' },
    many: { type: 'string', default: '0' },
  },
});
const RUNS = Number(values.runs);
const SCALE_RUNS = Number(values['scale-runs']);
const MANY = Number(values.many);
const UK = process.env.UNIHOST_UNIKRAFT_DIR ?? join('..', 'shared', 'unikraft');

/** Non-zero 4 KiB pages of a raw QEMU's guest memory (QMP `pmemsave` of its first `mb` MB), in bytes. */
async function guestTouched(dir: string, mb: number): Promise<number> {
  const q = await QmpClient.connect(join(dir, 'qmp.sock'), 5000);
  const file = join(dir, 'mem.bin');
  try {
    await q.execute('pmemsave', { val: 0, size: mb * 1024 * 1024, filename: file });
  } finally {
    q.close();
  }
  const mem = readFileSync(file);
  let pages = 0;
  for (let off = 0; off < mem.length; off += 4096) {
    const page = mem.subarray(off, off + 4096);
    if (page.some((b) => b !== 0)) pages++;
  }
  return pages * 4096;
}

/**
 * --many N: N c-http masters with stateful scale-to-zero, created 10 at a
 * time, left to go to standby; then their snapshots' disk use, the QEMU
 * processes left (none should be), and the CPU this process (the daemon)
 * uses over 10 s with all of them in standby.
 */
async function manyInStandby(d: Daemon, call: ReturnType<typeof apiCaller>, dataDir: string): Promise<void> {
  const big = { hard: { instances: 10_000, live_instances: 10_000, live_memory_mb: 1_000_000 }, limits: {} };
  await d.services.users.setQuotas('bench', {
    hard: { ...big.hard, service_groups: 10_000, services: 10_000, domains: 10_000, snapshot_mb: 100_000 },
    limits: {},
  });
  const t0 = performance.now();
  for (let i = 0; i < MANY; i += 10) {
    const batch = Array.from({ length: Math.min(10, MANY - i) }, (_, k) => ({
      name: `many${i + k}`,
      image: 'c-http:latest',
      memory_mb: 16,
      service_group: { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] },
      scale_to_zero: { policy: 'on', cooldown_time_ms: 300, stateful: true },
      autostart: true,
      wait_timeout_ms: -1,
    }));
    const r = await call('POST', '/v1/instances', batch);
    const bad = (r.data.instances ?? []).filter((e) => e.state !== 'running');
    if (bad.length > 0 || r.status !== 'success')
      throw new Error(`--many: create failed: ${JSON.stringify(r).slice(0, 500)}`);
  }
  const created = performance.now() - t0;
  const end = Date.now() + 600_000;
  let standby = 0;
  for (;;) {
    const list = (await call('GET', '/v1/instances', {})).data.instances ?? [];
    const many = list.filter((i) => String(i.name).startsWith('many'));
    standby = many.filter((i) => i.state === 'standby' && i.snapshot).length;
    if (standby === MANY) break;
    if (Date.now() > end) throw new Error(`--many: only ${standby} of ${MANY} in stateful standby after 10 min`);
    await new Promise((r) => setTimeout(r, 500));
  }
  const list = (await call('GET', '/v1/instances', {})).data.instances ?? [];
  const bytes = list
    .filter((i) => String(i.name).startsWith('many'))
    .reduce((s, i) => s + ((i.snapshot as { size_bytes: number } | undefined)?.size_bytes ?? 0), 0);
  const du = execFileSync('du', ['-sb', join(dataDir, 'instances')], { encoding: 'utf8' }).split('\t')[0];
  const qemus = qemuProcs([dataDir]).length;
  const c0 = process.cpuUsage();
  await new Promise((r) => setTimeout(r, 10_000));
  const c1 = process.cpuUsage(c0);
  console.log(
    `\n# --many: ${MANY} c-http masters with stateful scale-to-zero (created in ${(created / 1000).toFixed(1)} s)`,
  );
  console.log(
    `all in standby with a snapshot: snapshots ${(bytes / 2 ** 30).toFixed(3)} GiB in all (${(bytes / MANY / 1e6).toFixed(2)} MB each; goal for 200: <= 1 GiB); ` +
      `instance directories ${(Number(du) / 2 ** 30).toFixed(3)} GiB (console logs included); QEMU processes left: ${qemus}; ` +
      `daemon CPU over 10 s idle: ${((c1.user + c1.system) / 1000).toFixed(0)} ms`,
  );
}

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
      // --many: hundreds of standby instances count as live; this host's vCPU budget would refuse them
      ...(MANY > 0 ? { capacity: { ...DEFAULTS.capacity, vcpusPerCore: 0 } } : {}),
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
    /** A c-http master with scale-to-zero (stateful: memory kept in a snapshot); its group's FQDN. */
    const master = async (name: string, stateful: boolean): Promise<string> => {
      const created = await call('POST', '/v1/instances', {
        name,
        image: 'c-http:latest',
        memory_mb: 16,
        service_group: { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] },
        scale_to_zero: { policy: 'on', cooldown_time_ms: 300, stateful },
        autostart: true,
        wait_timeout_ms: -1,
      });
      const e = created.data.instances![0]!;
      if (e.state !== 'running') throw new Error(`c-http did not start: ${JSON.stringify(created)}`);
      return (e.service_group as { domains: { fqdn: string }[] }).domains[0]!.fqdn;
    };
    const fqdns = { sleepy: await master('sleepy', false), stateful: await master('stateful', true) };
    const port = gwc.dataPlane!.boundPort(443)!;
    /** A request on a new TLS connection through the gateway; ms until the response headers. */
    const firstByte = async (fqdn: string): Promise<number> => {
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
    const view = async (name: string) => (await call('GET', '/v1/instances', { name })).data.instances![0]!;
    const standby = async (name: string): Promise<Record<string, unknown>> => {
      const end = Date.now() + 60_000;
      for (;;) {
        const i = await view(name);
        if (i.state === 'standby') return i;
        if (Date.now() > end) throw new Error(`${name} never reached standby`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };

    /** (f), (g): create (autostart, a new group) -> first byte through the gateway; the instance is deleted after. */
    const createToFirstByte = async (name: string, from: Record<string, unknown>): Promise<number> => {
      const t0 = performance.now();
      const r = await call('POST', '/v1/instances', {
        name,
        ...from,
        service_group: { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] },
        autostart: true,
        wait_timeout_ms: -1,
      });
      const e = r.data.instances![0]!;
      if (e.state !== 'running') throw new Error(`${name} did not start: ${JSON.stringify(r)}`);
      const fqdn = (e.service_group as { domains: { fqdn: string }[] }).domains[0]!.fqdn;
      // a new group: the gateway routes it within a few ms of the instance running
      for (;;) {
        try {
          await firstByte(fqdn);
          break;
        } catch (x) {
          if (performance.now() - t0 > 30_000) throw x;
          await new Promise((res) => setTimeout(res, 2));
        }
      }
      const ms = performance.now() - t0;
      await call('DELETE', '/v1/instances', { name });
      return ms;
    };
    // the template (f) starts from: a c-http booted once, made a template
    await call('POST', '/v1/instances', {
      name: 'golden',
      image: 'c-http:latest',
      memory_mb: 16,
      autostart: true,
      wait_timeout_ms: -1,
    });
    const tpl = await call('POST', '/v1/instances/templates', { name: 'golden', timeout_s: 60 });
    if (tpl.data.instances?.[0]?.state !== 'template') throw new Error(`no template: ${JSON.stringify(tpl)}`);

    raw = new RawQemu(d);
    const f: number[] = [];
    const g: number[] = [];
    const a: number[] = [];
    const b: number[] = [];
    const c: number[] = [];
    const sf: number[] = [];
    const restore: number[] = [];
    const snapBytes: number[] = [];
    /** where (e) goes: start decision -> spawn, spawn -> QMP answers, QMP -> guest resumed */
    const parts = { decide: [] as number[], qmp: [] as number[], resume: [] as number[] };
    for (let i = 0; i < RUNS; i++) {
      a.push(await raw.time('c-http:latest', () => portOpen(RAW_IP, 8080)));
      await standby('sleepy');
      b.push(await firstByte(fqdns.sleepy));
      c.push(await firstByte(fqdns.sleepy));
      const snap = (await standby('stateful')).snapshot as { size_bytes: number } | undefined;
      if (!snap) throw new Error('the stateful master reached standby without a snapshot (see the daemon log)');
      snapBytes.push(snap.size_bytes);
      sf.push(await firstByte(fqdns.stateful));
      // decision (the start) -> spawn, then spawn -> the guest resumed (developer fields)
      const w = await view('stateful');
      restore.push(((w.vmm_start_time_us as number) + (w.vmm_ready_time_us as number)) / 1000);
      parts.decide.push((w.vmm_start_time_us as number) / 1000);
      parts.qmp.push((w.vmm_load_time_us as number) / 1000);
      parts.resume.push(((w.vmm_ready_time_us as number) - (w.vmm_load_time_us as number)) / 1000);
      f.push(await createToFirstByte(`clone-${i}`, { template: { name: 'golden' } }));
      g.push(await createToFirstByte(`cold-${i}`, { image: 'c-http:latest', memory_mb: 16 }));
    }
    let touched = 0;
    await raw.time('c-http:latest', async (dir) => {
      await portOpen(RAW_IP, 8080);
      touched = await guestTouched(dir, 16);
    });
    const starts = (await view('sleepy')).start_count;
    const restores = (await view('stateful')).start_count;
    console.log(
      `# bench/wake: c-http (${UK}), 16 MB, TCG, ${RUNS} cycles; the masters started ${starts} and ${restores} times`,
    );
    console.log(`(a) raw QEMU spawn -> port 8080 accepts                   ${fmt(a)}`);
    console.log(`(b) first byte through the gateway from standby            ${fmt(b)}`);
    console.log(`(c) first byte through the gateway, instance running       ${fmt(c)}`);
    console.log(`(d) first byte through the gateway from stateful standby   ${fmt(sf)}`);
    console.log(`(e) stateful restore: start decision -> guest resumed      ${fmt(restore)}`);
    console.log(`(f) clone of a template: create -> first byte (gateway)   ${fmt(f)}`);
    console.log(`(g) create from the image: create -> first byte (gateway) ${fmt(g)}`);
    const over = stats(b).median - stats(a).median;
    console.log(
      `(b) - (a) at the median: ${over.toFixed(0)} ms (goal <= 20 ms); the wake itself, (b) - (c): ${(stats(b).median - stats(c).median).toFixed(0)} ms`,
    );
    const worst = (xs: number[]) => Math.max(...xs);
    console.log(
      `(d) / (a): median ${(stats(sf).median / stats(a).median).toFixed(2)}, worst ${(worst(sf) / stats(a).median).toFixed(2)} (goal <= 0.35); ` +
        `(e) median ${stats(restore).median.toFixed(0)} ms, worst ${worst(restore).toFixed(0)} ms (goal <= 30 ms)`,
    );
    console.log(
      `(f) / (a): median ${(stats(f).median / stats(a).median).toFixed(2)}, worst ${(worst(f) / stats(a).median).toFixed(2)} (goal <= 0.5); ` +
        `(f) / (g): median ${(stats(f).median / stats(g).median).toFixed(2)}`,
    );
    const med = (xs: number[]) => stats(xs).median.toFixed(0);
    console.log(
      `(e) at the median = decision -> QEMU spawned ${med(parts.decide)} ms + spawn -> QMP answers ${med(parts.qmp)} ms ` +
        `(QEMU's own start, the snapshot read while it starts) + QMP -> resumed ${med(parts.resume)} ms`,
    );
    const size = stats(snapBytes).median;
    console.log(
      `snapshot ${(size / 1e6).toFixed(2)} MB; guest memory touched (non-zero 4 KiB pages of a running c-http) ` +
        `${(touched / 1e6).toFixed(2)} MB: ${(size / touched).toFixed(2)}x (goal <= 1.5x); ` +
        `200 such standby instances: ${((200 * size) / 2 ** 30).toFixed(2)} GiB of disk (goal <= 1 GiB; computed, not run)`,
    );
    if (MANY > 0) await manyInStandby(d, call, dataDir);
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
    policies: [GUEST_CPU_STEPS],
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
