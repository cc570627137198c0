/**
 * bench/soak: the daemon under mixed load for a long time; its resources
 * must stay flat (issue 26, "Soak").
 *
 *   npx tsx bench/soak.ts [--minutes 60] [--sample-s 30] [--check] [--malloc jemalloc|glibc]
 *                         [--daemon-env KEY=VALUE ...] [--settle-s 5]
 *
 * Runs the real daemon (`unihost serve`, a process of its own so that its
 * figures are its own) with the private network, the HAProxy gateway and
 * QEMU (TCG), inside a network namespace it creates and deletes, with
 * Unikraft's c-http (UNIHOST_UNIKRAFT_DIR, default ../shared/unikraft) and
 * the Linux test images. For `--minutes`, side by side:
 *   - API traffic: list, get, create and delete of stopped instances, tag
 *     updates, history (a few calls every 100 ms);
 *   - boots: a c-http instance with a new service group is created started,
 *     answers through the gateway and is deleted, again and again;
 *   - wakes: two c-http scale-to-zero masters (one stateful) are asked
 *     through the gateway every 2 s, so they sleep and wake all the time;
 *   - gateway load: 4 loops of keep-alive HTTPS requests to a running c-http, each every
 *     250 ms (within what one lwIP guest holds).
 * Every `--sample-s` it reads the daemon's RSS, open file descriptors and
 * TCP sockets, HAProxy's processes and descriptors, the QEMU processes and
 * the data dir's disk use. At the end the load stops, the instances it
 * made are deleted, and the same figures are read once settled (after
 * `--settle-s` of idling).
 * `--check` (the short form, `--minutes 1`) exits 1 when a
 * count that must come back (descriptors, sockets, HAProxy processes, QEMUs,
 * disk) did not; RSS is reported, not judged (it is a figure for docs).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { runFileInNewNetns } from '../test/helpers/netns.js';
import { guestOut, instanceQemus, ROOT, warmQemus } from '../test/helpers/vm.js';
import { apiCaller } from './boot-unikraft.js';
import { freePort } from '../src/gateway/haproxy/process.js';
import { JEMALLOC, JEMALLOC_CONF } from '../src/cli/admin/service.js';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '60' },
    'sample-s': { type: 'string', default: '30' },
    check: { type: 'boolean', default: false },
    // the daemon's allocator: jemalloc as scripts/up.sh and the systemd unit start it (when the host
    // has Debian's libjemalloc2), or glibc's malloc (docs/operations.md, "Memory")
    malloc: { type: 'string', default: 'jemalloc' },
    // for diagnosis, e.g. `--daemon-env MALLOC_ARENA_MAX=2`, or heaptrack's LD_PRELOAD (docs/operations.md)
    'daemon-env': { type: 'string', multiple: true, default: [] },
    // how long the daemon idles after the load before the settled figures (a sample every 15 s meanwhile)
    'settle-s': { type: 'string', default: '5' },
  },
});
const MINUTES = Number(values.minutes);
const SAMPLE_MS = Number(values['sample-s']) * 1000;
const SETTLE_MS = Number(values['settle-s']) * 1000;
const UK = process.env.UNIHOST_UNIKRAFT_DIR ?? join(ROOT, '..', 'shared', 'unikraft');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Sample {
  at: number;
  rssMb: number;
  /** of the RSS: glibc's main arena (the brk heap), and the anonymous mappings (V8's heap, other arenas, jemalloc's) */
  brkMb: number;
  anonMb: number;
  /** V8's heap as the daemon's /metrics says: in use, and committed */
  v8UsedMb: number;
  v8TotalMb: number;
  /** of the committed heap, the young generation's (new space) */
  v8NewMb: number;
  fds: number;
  sockets: number;
  haproxyProcs: number;
  haproxyFds: number;
  qemus: number;
  /** QEMUs started in advance for restores (docs/snapshots.md, "Warm restores") */
  warmQemus: number;
  diskMb: number;
}

/** The open descriptors of `pid` and how many are sockets. */
function fdsOf(pid: number): { fds: number; sockets: number } {
  let fds = 0;
  let sockets = 0;
  for (const f of readdirSync(`/proc/${pid}/fd`)) {
    fds++;
    try {
      if (readlinkSync(`/proc/${pid}/fd/${f}`).startsWith('socket:')) sockets++;
    } catch {
      /* closed meanwhile */
    }
  }
  return { fds, sockets };
}

/** HAProxy processes of this data dir (master and workers) and their descriptors. */
function haproxyOf(dataDir: string): { procs: number; fds: number } {
  let procs = 0;
  let fds = 0;
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const cmd = (() => {
      try {
        return readFileSync(`/proc/${e}/cmdline`, 'utf8');
      } catch {
        return '';
      }
    })();
    if (!cmd.startsWith('/usr/sbin/haproxy') || !cmd.includes(dataDir)) continue;
    procs++;
    try {
      fds += fdsOf(Number(e)).fds;
    } catch {
      /* gone */
    }
  }
  return { procs, fds };
}

/** The RSS (kB) of the brk heap and of the anonymous mappings, from /proc/<pid>/smaps. */
function mappings(pid: number): { brk: number; anon: number } {
  let brk = 0;
  let anon = 0;
  let kind: 'brk' | 'anon' | 'other' = 'other';
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ (\d+)\s*(.*)$/.exec(line);
    if (head) kind = head[2] === '[heap]' ? 'brk' : head[1] === '0' && head[2] === '' ? 'anon' : 'other';
    else if (line.startsWith('Rss:')) {
      const kb = Number(/(\d+)/.exec(line)?.[1] ?? 0);
      if (kind === 'brk') brk += kb;
      else if (kind === 'anon') anon += kb;
    }
  }
  return { brk, anon };
}

/** V8's heap (used, committed; bytes) from the daemon's Prometheus metrics. */
async function v8Heap(url: string, token: string): Promise<{ used: number; total: number; young: number }> {
  try {
    const r = await request(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
    const text = await r.body.text();
    const value = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN);
    return {
      used: value('nodejs_heap_size_used_bytes'),
      total: value('nodejs_heap_size_total_bytes'),
      young: value('nodejs_heap_space_size_total_bytes\\{space="new"\\}'),
    };
  } catch {
    return { used: NaN, total: NaN, young: NaN };
  }
}

async function sample(pid: number, dataDir: string, t0: number, url: string, token: string): Promise<Sample> {
  const heap = await v8Heap(url, token);
  const rss = Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  const { brk, anon } = mappings(pid);
  const { fds, sockets } = fdsOf(pid);
  const hp = haproxyOf(dataDir);
  // du says so (and exits 1) when a file goes while it walks: its total still counts
  let out: string;
  try {
    out = execFileSync('du', ['-sb', dataDir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch (e) {
    out = String((e as { stdout?: string }).stdout ?? '0');
  }
  const du = Number(out.split('\t')[0]);
  return {
    at: Math.round((Date.now() - t0) / 1000),
    rssMb: Math.round(rss / 1024),
    brkMb: Math.round(brk / 1024),
    anonMb: Math.round(anon / 1024),
    v8UsedMb: Math.round(heap.used / 2 ** 20),
    v8TotalMb: Math.round(heap.total / 2 ** 20),
    v8NewMb: Math.round(heap.young / 2 ** 20),
    fds,
    sockets,
    haproxyProcs: hp.procs,
    haproxyFds: hp.fds,
    qemus: instanceQemus(dataDir).length,
    warmQemus: warmQemus(dataDir).length,
    diskMb: Math.round(du / 2 ** 20),
  };
}

const row = (s: Sample) =>
  `${String(s.at).padStart(6)} s  rss ${String(s.rssMb).padStart(4)} MB (brk ${String(s.brkMb).padStart(3)}, anon ${String(s.anonMb).padStart(3)}; V8 ${s.v8UsedMb}/${s.v8TotalMb}, new ${s.v8NewMb})  fds ${String(s.fds).padStart(4)}  sockets ${String(s.sockets).padStart(4)}  haproxy ${s.haproxyProcs} procs ${String(s.haproxyFds).padStart(4)} fds  qemus ${String(s.qemus).padStart(2)} (+${s.warmQemus} warm)  disk ${s.diskMb} MB`;

async function inner(): Promise<number> {
  const kernel = join(UK, 'c-http_qemu-x86_64');
  if (!existsSync(kernel)) {
    console.log(`# bench/soak: no c-http kernel in ${UK} (set UNIHOST_UNIKRAFT_DIR); skipped`);
    return 0;
  }
  if (!existsSync(join(ROOT, 'dist', 'cli', 'main.js')))
    execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'inherit' });
  const dataDir = mkdtempSync(join(tmpdir(), 'unihost-soak-'));
  const env = { ...process.env, UNIHOST_ACCEL: 'tcg', UNIHOST_LOG_LEVEL: 'info' };
  if (values.malloc !== 'jemalloc' && values.malloc !== 'glibc')
    throw new Error(`--malloc wants jemalloc or glibc, got '${values.malloc}'`);
  if (values.malloc === 'jemalloc' && !existsSync(JEMALLOC))
    throw new Error(`--malloc jemalloc: no ${JEMALLOC} (apt-get install libjemalloc2), or --malloc glibc`);
  /** given to the daemon only (not to the CLI calls that set it up) */
  const daemonEnv: Record<string, string> =
    values.malloc === 'jemalloc' ? { LD_PRELOAD: JEMALLOC, MALLOC_CONF: JEMALLOC_CONF } : {};
  Object.assign(
    daemonEnv,
    Object.fromEntries(
      values['daemon-env'].map((kv) => {
        const eq = kv.indexOf('=');
        if (eq < 1) throw new Error(`--daemon-env wants KEY=VALUE, got '${kv}'`);
        return [kv.slice(0, eq), kv.slice(eq + 1)];
      }),
    ),
  );
  const cli = (...args: string[]): string =>
    execFileSync(process.execPath, [join(ROOT, 'bin', 'unihost.js'), ...args, '--data-dir', dataDir], {
      cwd: ROOT,
      env,
      encoding: 'utf8',
    });
  cli('image', 'import-guest', guestOut());
  cli(
    'image',
    'import',
    'c-http:latest',
    '--kernel',
    kernel,
    '--port',
    '8080',
    '--machine',
    'pc',
    '--firmware',
    'seabios',
  );
  // a developer account: it also reads the daemon's /metrics (V8's heap)
  const token = cli('admin', 'user', 'create', 'soak', '--developer', '--quiet').trim();
  const port = await freePort('127.0.0.1');
  const log = openSync(join(dataDir, 'daemon.log'), 'a');
  const daemon: ChildProcess = spawn(
    process.execPath,
    [join(ROOT, 'bin', 'unihost.js'), 'serve', '--data-dir', dataDir, '--listen', `127.0.0.1:${port}`],
    { cwd: ROOT, env: { ...env, ...daemonEnv }, stdio: ['ignore', log, log] },
  );
  closeSync(log);
  const url = `http://127.0.0.1:${port}`;
  const call = apiCaller(url, token);
  let failures = 0;
  /** when the first failures happened: the daemon's log around them is printed */
  const failedAt: number[] = [];
  /** every failure: what failed, and in which minute of the load */
  const failedWhen: { what: string; minute: number }[] = [];
  try {
    for (let i = 0; ; i++) {
      if (daemon.exitCode !== null)
        throw new Error(`the daemon exited: ${readFileSync(join(dataDir, 'daemon.log'), 'utf8')}`);
      try {
        await call('GET', '/v1/instances/list', undefined);
        break;
      } catch {
        if (i > 600) throw new Error('the daemon API did not come up');
        await sleep(100);
      }
    }
    const said = /"msg":"(memory allocator: \w+)"/.exec(readFileSync(join(dataDir, 'daemon.log'), 'utf8'))?.[1];
    console.log(`# daemon: ${said ?? 'memory allocator: (not logged)'}`);
    // the metro CA the gateway's wildcard certificate comes from (written when the gateway starts)
    let ca = '';
    const gwPort = 443;
    const count = { api: 0, boots: 0, wakes: 0, requests: 0, retried: 0 };
    const refusals = new Map<string, string>();
    const https = async (fqdn: string, agent?: Agent): Promise<number> => {
      const own = agent ?? new Agent({ connect: { ca, servername: fqdn } });
      const once = async () => {
        const r = await request(`https://127.0.0.1:${gwPort}/`, {
          headers: { host: fqdn },
          dispatcher: own,
          headersTimeout: 30_000,
        });
        const body = await r.body.text();
        // what a refusal says (the activator and HAProxy answer in words), for the failure's message
        if (r.statusCode !== 200) refusals.set(fqdn, `${r.statusCode} ${body.trim().slice(0, 300)}`);
        return r.statusCode;
      };
      try {
        try {
          return await once();
        } catch (e) {
          // a GET on a kept-alive connection the server closed as it was sent: asked again on a new
          // one, as HTTP clients do for idempotent requests (counted: a reload's old worker does it)
          if (!agent || (e as { code?: string }).code !== 'UND_ERR_SOCKET') throw e;
          count.retried++;
          return await once();
        }
      } finally {
        if (!agent) await own.close();
      }
    };
    const group = { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] };
    const fqdnOf = (e: Record<string, unknown>) =>
      (e.service_group as { domains: { fqdn: string }[] }).domains[0]!.fqdn;
    const make = async (name: string, extra: Record<string, unknown>) => {
      const r = await call('POST', '/v1/instances', {
        name,
        image: 'c-http:latest',
        memory_mb: 16,
        service_group: group,
        autostart: true,
        wait_timeout_ms: -1,
        ...extra,
      });
      const e = r.data.instances![0]!;
      if (e.state !== 'running') throw new Error(`${name} did not start: ${JSON.stringify(r)}`);
      return fqdnOf(e);
    };
    const steady = await make('steady', {});
    ca = readFileSync(join(dataDir, 'ca', 'ca.pem'), 'utf8');
    for (let i = 0; i < 500; i++) {
      const s = await https(steady).catch(() => 0);
      if (s === 200) break;
      await sleep(20);
    }
    const sleepy = await make('sleepy', { scale_to_zero: { policy: 'on', cooldown_time_ms: 500 } });
    const dreamy = await make('dreamy', { scale_to_zero: { policy: 'on', cooldown_time_ms: 500, stateful: true } });
    await sleep(3000);
    const t0 = Date.now();
    const baseline = await sample(daemon.pid!, dataDir, t0, url, token);
    console.log(`# bench/soak: ${MINUTES} min of mixed load; the daemon is pid ${daemon.pid}, data dir ${dataDir}`);
    console.log(`baseline ${row(baseline)}`);
    const end = t0 + MINUTES * 60_000;
    const fail = (what: string, e: unknown) => {
      failures++;
      if (failedAt.length < 3) failedAt.push(Date.now());
      failedWhen.push({ what, minute: Math.floor((Date.now() - t0) / 60_000) });
      const at = `${Math.round((Date.now() - t0) / 1000)} s`;
      if (failures <= 20)
        console.log(`# failure (${what}, at ${at}, ${new Date().toISOString()}): ${(e as Error).message ?? String(e)}`);
    };
    const loop = async (what: string, body: () => Promise<void>) => {
      while (Date.now() < end) {
        try {
          await body();
        } catch (e) {
          fail(what, e);
          await sleep(500);
        }
      }
    };
    const samples: Sample[] = [];
    let n = 0;
    let bootN = 0;
    await Promise.all([
      loop('api', async () => {
        const name = `api-${n++}`;
        await call('POST', '/v1/instances', { name, image: 'c-http:latest', memory_mb: 16 });
        await call('PATCH', '/v1/instances', { name, prop: 'tags', op: 'set', value: ['soak'] });
        await call('GET', '/v1/instances', { name });
        await call('GET', '/v1/instances/history', { name });
        await call('GET', '/v1/instances/list', undefined);
        await call('DELETE', '/v1/instances', { name });
        count.api += 6;
        await sleep(100);
      }),
      loop('boot', async () => {
        const name = `boot-${bootN++}`;
        try {
          const fqdn = await make(name, {});
          // a new group is routed within milliseconds of its instance running; until then a new
          // connection may be refused (a TLS alert or a 503): asked again, as a client would
          let ok = false;
          for (let i = 0; i < 100 && !ok; i++) {
            ok = (await https(fqdn).catch(() => 0)) === 200;
            if (!ok) await sleep(20);
          }
          if (!ok) throw new Error(`${name} never answered through the gateway`);
          count.boots++;
        } finally {
          await call('DELETE', '/v1/instances', { name }).catch(() => undefined);
        }
      }),
      loop('wake', async () => {
        for (const fqdn of [sleepy, dreamy]) {
          const status = await https(fqdn).catch((e: Error) => {
            throw new Error(`wake of ${fqdn}: ${e.message}`, { cause: e });
          });
          if (status !== 200) throw new Error(`wake of ${fqdn} answered ${refusals.get(fqdn) ?? status}`);
          count.wakes++;
        }
        await sleep(2000);
      }),
      ...Array.from({ length: 4 }, () => {
        const agent = new Agent({ connect: { ca, servername: steady } });
        return loop('gateway', async () => {
          const status = await https(steady, agent);
          if (status !== 200) throw new Error(`gateway answered ${refusals.get(steady) ?? status}`);
          count.requests++;
          // about 14 requests a second in all: within what one c-http holds (it closes each connection and
          // keeps it in TIME_WAIT for 120 s; at ~35 a second connects meet those ports in bursts, and five
          // tries in a row answer 503: docs/network.md, "How many connections an lwIP guest holds")
          await sleep(250);
        }).finally(() => agent.close());
      }),
      (async () => {
        while (Date.now() < end) {
          await sleep(Math.min(SAMPLE_MS, Math.max(0, end - Date.now())));
          const s = await sample(daemon.pid!, dataDir, t0, url, token);
          samples.push(s);
          console.log(`         ${row(s)}`);
        }
      })(),
    ]);
    // the load ends: what it made goes, and the figures must come back
    for (const i of (await call('GET', '/v1/instances/list', undefined)).data.instances ?? [])
      if (!['steady', 'sleepy', 'dreamy'].includes(i.name as string))
        await call('DELETE', '/v1/instances', { uuid: i.uuid });
    // idle: what the allocators and V8 give back once the load is gone
    for (let left = SETTLE_MS; left > 15_000; left -= 15_000) {
      await sleep(15_000);
      console.log(`idle     ${row(await sample(daemon.pid!, dataDir, t0, url, token))}`);
    }
    await sleep(SETTLE_MS % 15_000 || Math.min(SETTLE_MS, 15_000));
    const settled = await sample(daemon.pid!, dataDir, t0, url, token);
    console.log(`settled  ${row(settled)}`);
    console.log(
      `# ${count.api} API calls, ${count.boots} boots, ${count.wakes} wakes, ${count.requests} gateway requests (${count.retried} asked again on a new connection: their kept-alive one closed as they were sent); ${failures} failures`,
    );
    if (failedWhen.length > 0) {
      // by kind, and the minutes they came in: a burst (one stalled guest) reads apart from a steady trickle
      const byKind = new Map<string, Map<number, number>>();
      for (const f of failedWhen) {
        const minutes = byKind.get(f.what) ?? new Map<number, number>();
        minutes.set(f.minute, (minutes.get(f.minute) ?? 0) + 1);
        byKind.set(f.what, minutes);
      }
      for (const [what, minutes] of byKind) {
        const all = [...minutes.values()].reduce((a, b) => a + b, 0);
        const list = [...minutes].map(([m, n]) => `${n} in minute ${m}`).join(', ');
        console.log(`# failures of ${what}: ${all} (${list})`);
      }
    }
    const peakRss = Math.max(...samples.map((s) => s.rssMb), baseline.rssMb);
    console.log(`# daemon RSS: baseline ${baseline.rssMb} MB, peak ${peakRss} MB, settled ${settled.rssMb} MB`);
    if (!values.check) return 0;
    const problems: string[] = [];
    // what must come back: small slack for the timers, caches and keep-alive pools of a busy process
    if (settled.fds > baseline.fds + 16) problems.push(`descriptors ${baseline.fds} -> ${settled.fds}`);
    if (settled.sockets > baseline.sockets + 8) problems.push(`sockets ${baseline.sockets} -> ${settled.sockets}`);
    if (settled.haproxyProcs > baseline.haproxyProcs + 1)
      problems.push(`HAProxy processes ${baseline.haproxyProcs} -> ${settled.haproxyProcs} (old workers left)`);
    if (settled.qemus > 3) problems.push(`${settled.qemus} QEMU processes for at most 3 instances`);
    if (settled.warmQemus > 2) problems.push(`${settled.warmQemus} warm QEMUs (machines.warmVms is 2)`);
    if (settled.diskMb > baseline.diskMb + 64) problems.push(`disk ${baseline.diskMb} -> ${settled.diskMb} MB`);
    if (failures > 0) problems.push(`${failures} failed operations`);
    if (daemon.exitCode !== null || daemon.signalCode !== null)
      problems.push(`the daemon ended (${daemon.exitCode ?? daemon.signalCode})`);
    for (const p of problems) console.log(`# NOT FLAT: ${p}`);
    const lines = readFileSync(join(dataDir, 'daemon.log'), 'utf8').split('\n');
    if (problems.length > 0)
      console.log(
        `# the daemon's log, its last warnings, errors and wake lines:\n${lines
          .filter((l) => /"level":[5-6]0|"level":40|wake|"msg":"[^"]*(panic|exited|stopped)/.test(l))
          .slice(-40)
          .join('\n')}`,
      );
    for (const at of failedAt)
      console.log(
        `# the daemon's log from 5 s before a failure to 1 s after:\n${lines
          .filter((l) => {
            const t = Number(/"time":(\d+)/.exec(l)?.[1]);
            return t >= at - 5000 && t <= at + 1000;
          })
          .join('\n')}`,
      );
    return problems.length > 0 ? 1 : 0;
  } finally {
    daemon.kill('SIGTERM');
    await Promise.race([once(daemon, 'exit'), sleep(10_000)]);
    // VMs and HAProxy outlive the daemon by design: end the ones this run left (their files are under dataDir)
    spawn('pkill', ['-KILL', '-f', dataDir]).once('exit', () => rmSync(dataDir, { recursive: true, force: true }));
    await sleep(500);
  }
}

/** Re-runs this file inside a fresh network namespace and deletes it afterwards. */
function outer(): number {
  const r = runFileInNewNetns(import.meta.url, {
    prefix: 'uhsoak',
    args: process.argv.slice(2),
    env: { UH_BENCH_NETNS: '1' },
    stdio: 'inherit',
    // the load, then the settling and the clean-up (the runner's default of 10 minutes ended every
    // longer soak without a word)
    timeoutMs: (MINUTES + 15) * 60_000,
  });
  if (r.error) console.log(`# bench/soak: the run ended: ${r.error.message}`);
  return r.status ?? 1;
}

if (process.env.UH_BENCH_NETNS === '1') process.exitCode = await inner();
else process.exitCode = outer();
