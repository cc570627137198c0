/**
 * bench/network: the private network and volumes with real guests, in one run.
 *
 *   node --import tsx bench/network.ts [--runs 3] [--requests 200] [--seconds 8] [--connections 8] [--par 4] [--mb 64] [--accel tcg|kvm]
 *
 * Runs the real daemon (QEMU with TCG by default, bridge, taps, nftables, `.internal`
 * DNS) inside a network namespace this script creates and deletes: it re-runs
 * itself under `ip netns exec`, like test/vm/daemon-network.test.ts.
 *
 * HTTP: a guest `srv` (image `http`: busybox httpd, which closes the
 * connection after every response, so each request is a new TCP connection).
 *   - host → guest over the bridge: undici with 1 connection (sequential) and
 *     with --connections, and busybox wget (the guests' client) sequentially;
 *   - guest → guest: a guest `cli` (image `httpbench`) runs busybox wget
 *     against `srv` by IP and by `srv.internal`, sequentially and with --par
 *     loops, and against an httpd on its own loopback (the same process and
 *     TCP cost without the network). One wget process per request.
 * Disk: a guest (image `ddbench`) writes --mb MiB with `dd bs=1M conv=fsync`
 * to its volume (an ext4 image file on virtio-blk, QEMU's default writeback
 * cache) vs. the host writing the same with `dd` into a same-size ext4 image
 * (made like the daemon makes volumes) mounted with a loop device, and into a
 * raw image file. The same dd into a tmpfs, in the guest and on the host,
 * separates the CPU cost of the copy (emulated under TCG) from the block
 * path. Needs root, ip, nft, qemu-system-x86_64, mkfs.ext4 and the
 * test images (guest/build-images.sh).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { request } from 'undici';
import { DEFAULTS, type MachinesConfig } from '../src/config.js';
import { defaultControllers } from '../src/controllers.js';
import { startDaemon, type Daemon } from '../src/daemon.js';
import { importGuestImages } from '../src/images/guest.js';
import { killLeaks, poll, qemuProcs } from '../test/helpers/vm.js';
import { report, undiciConc, undiciSeq, undiciSeqOnce, type HttpRow } from './network-lib.js';

const SELF = fileURLToPath(import.meta.url);
const ROOT = resolve(dirname(SELF), '..');
const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    requests: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '8' },
    connections: { type: 'string', default: '8' },
    par: { type: 'string', default: '4' },
    mb: { type: 'string', default: '64' },
    accel: { type: 'string', default: 'tcg' },
  },
});
const RUNS = Number(values.runs);
const REQS = Number(values.requests);
const SECONDS = Number(values.seconds);
const CONNS = Number(values.connections);
const PAR = Number(values.par);
const MB = Number(values.mb);
const VOL_MB = MB * 2; // room for the file plus ext4's metadata and journal

/** Runs a command to its end; resolves with its exit code and output (never rejects on a non-zero code). */
function run(cmd: string, args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((res, rej) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (b: Buffer) => (out += b));
    p.stderr.on('data', (b: Buffer) => (out += b));
    p.once('error', rej);
    p.once('close', (code) => res({ code: code ?? -1, out }));
  });
}
async function must(cmd: string, args: string[]): Promise<string> {
  const r = await run(cmd, args);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.code}): ${r.out}`);
  return r.out;
}

// ---- outside: the namespace around the run ---------------------------------

async function outer(): Promise<number> {
  if (process.getuid?.() !== 0) throw new Error('bench/network needs root (network namespace, taps, loop mount)');
  const ns = `uhbench-${randomBytes(4).toString('hex')}`;
  const dataDir = mkdtempSync(join(tmpdir(), 'unihost-bench-net-'));
  // On a signal the inner run deletes its instances and closes the daemon; after a minute it is killed.
  let child: ChildProcess | undefined;
  let stopped = false;
  const onSignal = (sig: string) => {
    console.error(`bench/network: ${sig}, stopping the run`);
    stopped = true;
    child?.kill('SIGTERM');
    setTimeout(() => child?.kill('SIGKILL'), 60_000).unref();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  await must('ip', ['netns', 'add', ns]);
  let code = 1;
  try {
    await must('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
    if (stopped) return 130;
    child = spawn('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', SELF, ...process.argv.slice(2)], {
      stdio: 'inherit',
      env: { ...process.env, UH_BENCH_NETNS: ns, UH_BENCH_DIR: dataDir },
    });
    const c = child;
    code = await new Promise<number>((r) => c.once('close', (x) => r(x ?? 1)));
  } finally {
    // Whatever the inner run left in the namespace (QEMU included) goes with it.
    const pids = (await run('ip', ['netns', 'pids', ns])).out.split('\n').filter(Boolean);
    for (const p of pids) await run('kill', ['-9', p]);
    const leaked = killLeaks([dataDir]);
    await run('ip', ['netns', 'del', ns]);
    rmSync(dataDir, { recursive: true, force: true });
    const nsLeft = (await run('ip', ['netns', 'list'])).out;
    const qemuLeft = qemuProcs([dataDir]).length;
    const allQemu = (await run('pgrep', ['-c', 'qemu-system'])).out.trim();
    console.log(
      `\ncleanup: namespace ${ns} ${nsLeft.includes(ns) ? 'STILL PRESENT' : 'deleted'}, ` +
        `${leaked.length} QEMU killed after the run, ${qemuLeft} of ours left; ` +
        `host-wide: pgrep -c qemu-system = ${allQemu || 0}, ip netns list = [${nsLeft.trim().split('\n').filter(Boolean).join(', ')}]`,
    );
    if (leaked.length || qemuLeft || nsLeft.includes(ns)) code = code || 1;
  }
  return code;
}

// ---- inside the namespace: host → guest ----------------------------------------

/** The guests' client on the host: one busybox wget process per request, timed spawn to exit. */
async function wgetSeq(busybox: string, url: string): Promise<{ rps: number; lat: number[]; failed: number }> {
  const lat: number[] = [];
  let failed = 0;
  const t0 = performance.now();
  for (let i = 0; i < REQS; i++) {
    const t = performance.now();
    if ((await run(busybox, ['wget', '-q', '-O', '/dev/null', url])).code !== 0) failed++;
    lat.push(performance.now() - t);
  }
  return { rps: REQS / ((performance.now() - t0) / 1000), lat, failed };
}

// ---- inside the namespace: the daemon and its guests -------------------------

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any -- API envelopes, checked where read
type Api = (method: string, path: string, body: unknown) => Promise<Record<string, Json>>;

function api(d: Daemon, token: string): Api {
  return async (method, path, body) => {
    const r = await request(d.url + path, {
      method: method as 'GET',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return (await r.body.json()) as Record<string, unknown>;
  };
}

/** The whole console log of an instance, paged through GET /v1/instances/log. */
async function consoleLog(call: Api, name: string): Promise<string> {
  let out = '';
  for (let off = 0; ;) {
    const e = (await call('GET', '/v1/instances/log', { name, offset: off, limit: 16383 })).data.instances[0];
    const chunk = Buffer.from(e.output ?? '', 'base64');
    out += chunk.toString('utf8');
    if (chunk.length === 0 || e.range.end >= e.available.end) return out;
    off = e.range.end + 1;
  }
}

async function boot(call: Api, body: Record<string, unknown>): Promise<Record<string, Json>> {
  const r = await call('POST', '/v1/instances', { ...body, autostart: true, wait_timeout_ms: 300_000 });
  const e = r.data?.instances?.[0];
  if (e?.state !== 'running') throw new Error(`${String(body.name)} did not reach running: ${JSON.stringify(r)}`);
  return e;
}

/** Waits for `<app>: done` in the log (the guest benchmarks run once at boot) and returns the log. */
async function untilDone(call: Api, name: string, app: string, timeoutMs: number): Promise<string> {
  return poll(
    `${name} finished`,
    async () => {
      const l = await consoleLog(call, name);
      if (l.includes(`${app}: done`)) return l;
      const state = (await call('GET', '/v1/instances', { name })).data?.instances?.[0]?.state;
      if (state !== 'running') throw new Error(`${name} is ${String(state)} before '${app}: done':\n${l.slice(-3000)}`);
      return false;
    },
    timeoutMs,
    2000,
  );
}

/** httpbench's output → one row per phase (0 loopback, 1.. its URLs), sequential and parallel. */
function parseHttpbench(log: string, names: string[]): HttpRow[] {
  const rows = new Map<string, HttpRow>();
  const row = (what: string) => {
    if (!rows.has(what)) rows.set(what, { what, runs: 0, rps: [], lat: [], failed: 0, requests: 0 });
    return rows.get(what)!;
  };
  for (const line of log.split('\n')) {
    const m = /httpbench: r\d+ p(\d+) (lat|seq|par) ([\d ]+)/.exec(line);
    if (!m) continue;
    const name = names[Number(m[1])]!;
    const nums = m[3]!.trim().split(/\s+/).map(Number);
    if (m[2] === 'lat') row(`${name}, sequential`).lat.push(...nums.map((us) => us / 1000));
    if (m[2] === 'seq' || m[2] === 'par') {
      const [n, failed, us] = m[2] === 'seq' ? nums : nums.slice(1);
      const r = row(m[2] === 'seq' ? `${name}, sequential` : `${name}, ${PAR} loops at once`);
      r.runs++;
      r.rps.push(n! / (us! / 1e6));
      r.failed += failed!;
      r.requests += n!;
    }
  }
  return [...rows.values()];
}

/** Host baselines: `dd` of MB MiB with conv=fsync into an ext4 image (loop-mounted), a raw file and a tmpfs. */
async function hostDd(dir: string): Promise<{ ext4: number[]; raw: number[]; tmpfs: number[] }> {
  const img = join(dir, 'host-ext4.img');
  const mnt = join(dir, 'host-mnt');
  const raw = join(dir, 'host-raw.img');
  const tmp = join(dir, 'host-tmpfs');
  mkdirSync(mnt, { recursive: true });
  mkdirSync(tmp, { recursive: true });
  // the same mkfs.ext4 call the volume controller makes (src/reconcile/volumes.ts)
  await must('mkfs.ext4', ['-q', '-F', '-b', '4096', '-E', 'root_owner=0:0', img, `${VOL_MB}M`]);
  await must('truncate', ['-s', `${VOL_MB}M`, raw]);
  // (mounts made here live in the mount namespace of `ip netns exec` and vanish with it)
  await must('mount', ['-o', 'loop', img, mnt]);
  await must('mount', ['-t', 'tmpfs', '-o', `size=${VOL_MB}m`, 'bench', tmp]);
  const timed = async (args: string[], before: () => Promise<unknown>) => {
    const out: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      await before();
      await must('sync', []);
      const t = performance.now();
      await must('dd', ['if=/dev/zero', 'bs=1M', `count=${MB}`, ...args]);
      out.push((MB * 1000) / (performance.now() - t));
    }
    return out;
  };
  try {
    const file = join(mnt, 'ddbench.bin');
    const ext4 = await timed([`of=${file}`, 'conv=fsync'], () => run('rm', ['-f', file]));
    const rawMbs = await timed([`of=${raw}`, 'conv=notrunc,fsync'], async () => undefined);
    const tfile = join(tmp, 'ddbench.bin');
    const tmpfs = await timed([`of=${tfile}`, 'conv=fsync'], () => run('rm', ['-f', tfile]));
    return { ext4, raw: rawMbs, tmpfs };
  } finally {
    await run('umount', [mnt]);
    await run('umount', [tmp]);
  }
}

async function inner(): Promise<void> {
  const dataDir = process.env.UH_BENCH_DIR!;
  const log = pino({ level: process.env.UNIHOST_BENCH_LOG ?? 'warn' });
  const d = await startDaemon(
    {
      ...DEFAULTS,
      dataDir,
      listen: '127.0.0.1:0',
      subnet: '10.78.0.0/24',
      machines: { ...DEFAULTS.machines, accel: values.accel as MachinesConfig['accel'] },
      network: { ...DEFAULTS.network, enabled: true, bridge: 'uhbr0', dns: true, dnsPort: 53 },
      gateway: { ...DEFAULTS.gateway, enabled: false },
    },
    { logger: log, controllers: (s) => defaultControllers(s, log) },
  );
  let raw: Api | undefined;
  let stopping = false;
  // the run's calls fail once it is stopping, so it creates nothing while the cleanup deletes
  const call: Api = (m, p, b) => (stopping || !raw ? Promise.reject(new Error('stopped')) : raw(m, p, b));
  let cleaning: Promise<void> | undefined;
  // once, whether the run ends or a signal (or two: Ctrl-C plus the outer run's SIGTERM) cuts it short
  const cleanup = () =>
    (cleaning ??= (async () => {
      stopping = true;
      // an instance still starting may refuse the first delete: list and delete until none is left
      for (let end = Date.now() + 60_000; raw && Date.now() < end; await sleep(1000)) {
        const list = await raw('GET', '/v1/instances/list', {}).catch(() => undefined);
        const left: { uuid: string }[] = list?.data?.instances ?? [];
        if (list && left.length === 0) break;
        for (const i of left) await raw('DELETE', `/v1/instances/${i.uuid}`, {}).catch(() => 0);
      }
      await poll('VMs gone', () => qemuProcs([dataDir]).length === 0, 30_000).catch(() => undefined);
      await d.close();
      killLeaks([dataDir]);
    })());
  const onSignal = (sig: string) => {
    console.error(`bench/network (in the namespace): ${sig}, deleting the instances`);
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await importGuestImages(d.services.images, join(ROOT, 'guest', 'out'));
    const { token } = await d.services.users.create('bench', true);
    raw = api(d, token);
    const busybox = (await must('sh', ['-c', "dpkg -L busybox-static | grep -m1 -E '/bin/busybox$'"])).trim();
    console.log(
      `bench/network in namespace ${process.env.UH_BENCH_NETNS}: ${values.accel!.toUpperCase()} guests, 1 vCPU, 128 MB (ddbench 256 MB); ` +
        `load average ${loadavg()
          .map((x) => x.toFixed(2))
          .join(' ')} (${cpus().length} CPUs)`,
    );

    const srv = await boot(call, { name: 'srv', image: 'http:latest' });
    const url = `http://${srv.private_ip as string}:8080`;
    await poll('srv answers', async () => (await undiciSeqOnce(url)) === 200, 60_000, 500);
    const host: HttpRow[] = [
      { what: 'host → guest, undici, 1 connection, sequential', runs: 0, rps: [], lat: [], failed: 0, requests: 0 },
      { what: `host → guest, undici, ${CONNS} connections`, runs: 0, rps: [], lat: [], failed: 0, requests: 0 },
      { what: 'host → guest, busybox wget, sequential', runs: 0, rps: [], lat: [], failed: 0, requests: 0 },
    ];
    for (let i = 0; i < 20; i++) await undiciSeqOnce(url); // warm-up: httpd's pages in the guest
    for (let r = 0; r < RUNS; r++) {
      const rs = [await undiciSeq(url, REQS), await undiciConc(url, CONNS, SECONDS), await wgetSeq(busybox, `${url}/`)];
      rs.forEach((x, k) => {
        const row = host[k]!;
        row.runs++;
        row.rps.push(x.rps);
        row.lat.push(...x.lat);
        row.failed += x.failed;
        row.requests += 'n' in x ? (x.n as number) : REQS;
      });
    }
    console.log(`host → guest done (${url})`);

    await boot(call, {
      name: 'cli',
      image: 'httpbench:latest',
      args: [`${url}/`, 'http://srv.internal:8080/'],
      env: { HB_REQUESTS: String(REQS), HB_PAR: String(PAR), HB_ROUNDS: String(RUNS) },
    });
    const hb = await untilDone(call, 'cli', 'httpbench', 30 * 60_000);
    const guest = parseHttpbench(hb, [
      'guest loopback (own httpd), busybox wget',
      'guest → guest by IP, busybox wget',
      'guest → guest by srv.internal, busybox wget',
    ]);
    for (const n of ['cli', 'srv']) await call('DELETE', '/v1/instances', { name: n });
    console.log('guest → guest done');

    await boot(call, {
      name: 'dd',
      image: 'ddbench:latest',
      args: [String(MB), String(RUNS), '/data', '/tmp'],
      // 256 MB: the guest's /tmp tmpfs (half the memory) must hold the file
      memory_mb: 256,
      volumes: [{ size_mb: VOL_MB, at: '/data' }],
    });
    const ddLog = await untilDone(call, 'dd', 'ddbench', 20 * 60_000);
    const guestMbs = (dir: string) =>
      [...ddLog.matchAll(/ddbench: run \d+ (\S+) (\d+) (\d+) ok/g)]
        .filter((m) => m[1] === dir)
        .map((m) => Number(m[2]) / 1048576 / (Number(m[3]) / 1e6));
    const gd = { guest: guestMbs('/data'), guestTmpfs: guestMbs('/tmp') };
    if (gd.guest.length !== RUNS || gd.guestTmpfs.length !== RUNS)
      throw new Error(`ddbench runs failed:\n${ddLog.slice(-2000)}`);
    await call('DELETE', '/v1/instances', { name: 'dd' });
    await poll('dd gone', () => qemuProcs([dataDir]).length === 0, 30_000);
    const hostMbs = await hostDd(dataDir);

    report(host, guest, { ...gd, ...hostMbs }, { mb: MB, volMb: VOL_MB });
    console.log(
      `load average at the end: ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')} (${cpus().length} CPUs)`,
    );
  } finally {
    await cleanup();
  }
}

if (!process.env.UH_BENCH_NETNS) {
  process.exitCode = await outer().catch((e: unknown) => (console.error(e), 1));
} else {
  await inner().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
