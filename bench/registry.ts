/**
 * bench/registry: the platform's OCI registry against Debian's
 * `docker-registry` (distribution 2.8) on loopback, side by side in one run:
 * push and pull of one large blob (default 256 MiB) and of many small blobs
 * (default 200 of 4 KiB), each upload a POST then a PUT with the whole body
 * (what every registry supports), each pull a GET read to its end.
 *
 *   npm run build && npx tsx bench/registry.ts [--mb 256] [--small 200] [--rounds 5] [--malloc jemalloc|glibc]
 *
 * Both servers run in child processes, the load (undici) in this one. Each
 * phase of a round runs on the two back to back (who goes first alternates),
 * the large push and pull three times each in turns (median; one timing of
 * each moved by ±25 % with the disk), the pull read by curl; every push sends new
 * content (no deduplication); `sync` runs before each timed operation.
 * unihost answers with HTTP Basic auth on (its API token), docker-registry
 * with none. Figures: MiB/s for the large blob, operations/s for the small
 * ones; ratios unihost / docker-registry as the median and the worst round.
 * The large pull also prints the CPU time each server and curl spent per
 * pull (from /proc), which says whose work bounds it.
 */
import { execFile, execFileSync, fork } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs, promisify } from 'node:util';
import { Agent, request } from 'undici';
import { JEMALLOC, JEMALLOC_CONF } from '../src/cli/admin/service.js';
import { startDockerRegistry } from '../test/helpers/docker-registry.js';

const { values } = parseArgs({
  options: {
    mb: { type: 'string', default: '256' },
    small: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '5' },
    // the daemon's allocator: jemalloc as scripts/up.sh and the systemd unit give it, or glibc's malloc
    malloc: { type: 'string', default: 'jemalloc' },
  },
});
const execFileP = promisify(execFile);
const MB = Number(values.mb);
const SMALL = Number(values.small);
const ROUNDS = Number(values.rounds);
const CHUNK = 1024 * 1024;
const agent = new Agent({ connections: 4 });

interface Target {
  name: string;
  base: string;
  auth: Record<string, string>;
  /** the server's process */
  pid: number;
}

/**
 * CPU ms (user + system) of process `pid` from /proc/<pid>/stat, its own or
 * with `children`, that of its waited-for children (curl, once it exited).
 */
function cpuMs(pid: number | 'self', children = false): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  const at = children ? 13 : 11; // utime, stime (or cutime, cstime) after the state field
  return ((Number(f[at]) + Number(f[at + 1])) * 1000) / TICKS;
}
const TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString());
/** CPU ms per large pull, summed over the run: [server, curl] for each target. */
const pullCpu = new Map<string, { server: number; curl: number; n: number }>();

/** The large blob of a round: 1 MiB chunks, each stamped with the round, server and index. */
function* chunks(stamp: string, mb: number): Generator<Buffer> {
  for (let i = 0; i < mb; i++) {
    const b = Buffer.alloc(CHUNK, i % 251);
    b.write(`${stamp}:${i}`, 0);
    yield b;
  }
}
function digestOf(stamp: string, mb: number): string {
  const h = createHash('sha256');
  for (const c of chunks(stamp, mb)) h.update(c);
  return `sha256:${h.digest('hex')}`;
}

async function upload(t: Target, repo: string, body: Buffer | Iterable<Buffer>, digest: string, size: number) {
  const start = await request(`${t.base}/v2/${repo}/blobs/uploads/`, {
    method: 'POST',
    headers: t.auth,
    dispatcher: agent,
  });
  await start.body.dump();
  if (start.statusCode !== 202) throw new Error(`${t.name}: POST answered ${start.statusCode}`);
  const loc = String(start.headers.location);
  const url = new URL(loc, t.base);
  url.searchParams.set('digest', digest);
  const put = await request(url, {
    method: 'PUT',
    headers: { ...t.auth, 'content-type': 'application/octet-stream', 'content-length': String(size) },
    body: Buffer.isBuffer(body) ? body : (body as never),
    dispatcher: agent,
  });
  await put.body.dump();
  if (put.statusCode !== 201) throw new Error(`${t.name}: PUT answered ${put.statusCode}`);
}

async function download(t: Target, repo: string, digest: string): Promise<number> {
  const r = await request(`${t.base}/v2/${repo}/blobs/${digest}`, { headers: t.auth, dispatcher: agent });
  if (r.statusCode !== 200) throw new Error(`${t.name}: GET answered ${r.statusCode}`);
  let n = 0;
  for await (const c of r.body) n += (c as Buffer).length;
  return n;
}

/**
 * The large pull, read by curl (the body to /dev/null): a client in this
 * process reads at ~300 MiB/s here, slower than either server sends, and
 * shares their 2 cores; the figure would be the client's.
 */
async function curlDownload(t: Target, repo: string, digest: string): Promise<number> {
  const headers = Object.entries(t.auth).flatMap(([k, v]) => ['-H', `${k}: ${v}`]);
  const { stdout } = await execFileP('curl', [
    '-sS',
    '--fail',
    '-o',
    '/dev/null',
    '-w',
    '%{size_download}',
    ...headers,
    `${t.base}/v2/${repo}/blobs/${digest}`,
  ]);
  return Number(stdout);
}

interface Figures {
  pushMiBs: number;
  pullMiBs: number;
  smallPushOps: number;
  smallPullOps: number;
}

/**
 * Writes all dirty pages out before a timed phase. unihost fsyncs what it
 * acknowledges and docker-registry does not, so without this the kernel's
 * writeback of one server's push lands in whatever is measured next.
 */
const settle = () => execFileSync('sync');

/** Runs `op` for both servers in turns, `times` each, `first` starting; returns the median ms of each. */
async function paired(
  targets: [Target, Target],
  first: 0 | 1,
  times: number,
  op: (t: Target, i: number) => Promise<void>,
): Promise<[number, number]> {
  const ms: [number[], number[]] = [[], []];
  for (let i = 0; i < times; i++) {
    for (const k of first === 0 ? ([0, 1] as const) : ([1, 0] as const)) {
      settle();
      const t0 = performance.now();
      await op(targets[k], i);
      ms[k].push(performance.now() - t0);
    }
  }
  return [median(ms[0]), median(ms[1])];
}

/**
 * One round: each phase runs on both servers back to back (who goes first
 * alternates by round), so a disturbance on the machine falls on both; the
 * large push and pull, which take a second or less, are each taken three
 * times.
 */
async function round(targets: [Target, Target], r: number): Promise<[Figures, Figures]> {
  const first = (r % 2) as 0 | 1;
  const stamps = targets.map((t) => `${t.name}-${r}-${Date.now()}`);
  // three large pushes each, of different content, precomputed digests
  const bigStamps = stamps.map((s) => [0, 1, 2].map((i) => `${s}-${i}`));
  const big = bigStamps.map((ss) => ss.map((s) => digestOf(s, MB)));
  const push = await paired(targets, first, 3, (t, i) => {
    const k = targets.indexOf(t);
    return upload(t, 'bench/big', chunks(bigStamps[k]![i]!, MB), big[k]![i]!, MB * CHUNK);
  });
  const pull = await paired(targets, first, 3, async (t, i) => {
    const [server, curl] = [cpuMs(t.pid), cpuMs('self', true)];
    const got = await curlDownload(t, 'bench/big', big[targets.indexOf(t)]![i]!);
    if (got !== MB * CHUNK) throw new Error(`${t.name}: pulled ${got} bytes`);
    const c = pullCpu.get(t.name) ?? { server: 0, curl: 0, n: 0 };
    pullCpu.set(t.name, {
      server: c.server + cpuMs(t.pid) - server,
      curl: c.curl + cpuMs('self', true) - curl,
      n: c.n + 1,
    });
  });
  const small = stamps.map((s) =>
    Array.from({ length: SMALL }, (_, i) => Buffer.from(`${s} small ${i} `.padEnd(4096, '.'))),
  );
  const digests = small.map((bs) => bs.map((b) => `sha256:${createHash('sha256').update(b).digest('hex')}`));
  const sp = await paired(targets, first, 1, async (t) => {
    const k = targets.indexOf(t);
    for (let i = 0; i < SMALL; i++) await upload(t, 'bench/small', small[k]![i]!, digests[k]![i]!, 4096);
  });
  const sl = await paired(targets, first, 1, async (t) => {
    for (const d of digests[targets.indexOf(t)]!) await download(t, 'bench/small', d);
  });
  const figures = (k: 0 | 1): Figures => ({
    pushMiBs: MB / (push[k] / 1000),
    pullMiBs: MB / (pull[k] / 1000),
    smallPushOps: SMALL / (sp[k] / 1000),
    smallPullOps: SMALL / (sl[k] / 1000),
  });
  return [figures(0), figures(1)];
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

if (values.malloc === 'jemalloc' && !existsSync(JEMALLOC))
  throw new Error(`--malloc jemalloc: no ${JEMALLOC} (apt-get install libjemalloc2), or --malloc glibc`);
const child = fork(new URL('./servers/registry.mjs', import.meta.url).pathname, [], {
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  env:
    values.malloc === 'jemalloc' ? { ...process.env, LD_PRELOAD: JEMALLOC, MALLOC_CONF: JEMALLOC_CONF } : process.env,
});
const ready = await new Promise<{ url: string; token: string }>((resolve, reject) => {
  child.once('message', (m) => resolve(m as { url: string; token: string }));
  child.once('exit', (c) => reject(new Error(`registry server exited with ${c}`)));
});
const docker = await startDockerRegistry();
try {
  const name = Buffer.from(ready.token, 'base64').toString().split(':')[0]!;
  const unihost: Target = {
    name: 'unihost',
    base: ready.url,
    auth: { authorization: `Basic ${Buffer.from(`${name}:${ready.token}`).toString('base64')}` },
    pid: child.pid!,
  };
  const dr: Target = { name: 'docker-registry', base: `http://${docker.host}`, auth: {}, pid: docker.pid };
  // unihost repositories are <user>/<app>: the user is named `bench`, so `bench/big` is its own
  const rows: { u: Figures; d: Figures }[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const [u, d] = await round([unihost, dr], r).catch((e: Error) => {
      throw new Error(`round ${r}: ${e.message}`);
    });
    rows.push({ u, d });
    console.log(
      `round ${r + 1}: push ${u.pushMiBs.toFixed(0)} vs ${d.pushMiBs.toFixed(0)} MiB/s, pull ${u.pullMiBs.toFixed(0)} vs ${d.pullMiBs.toFixed(0)} MiB/s, ` +
        `small push ${u.smallPushOps.toFixed(0)} vs ${d.smallPushOps.toFixed(0)} /s, small pull ${u.smallPullOps.toFixed(0)} vs ${d.smallPullOps.toFixed(0)} /s`,
    );
  }
  console.log(
    `\nunihost / docker-registry, median (worst) of ${ROUNDS} rounds, ${MB} MiB blob, ${SMALL} blobs of 4 KiB:`,
  );
  for (const k of ['pushMiBs', 'pullMiBs', 'smallPushOps', 'smallPullOps'] as const) {
    const ratios = rows.map((x) => x.u[k] / x.d[k]);
    console.log(`  ${k.padEnd(13)} ${median(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)})`);
  }
  console.log(`\nCPU per ${MB} MiB pull, mean (server + curl):`);
  for (const [name, c] of pullCpu)
    console.log(`  ${name.padEnd(16)} ${(c.server / c.n).toFixed(0)} + ${(c.curl / c.n).toFixed(0)} ms`);
} finally {
  await docker.stop();
  child.disconnect();
  await agent.close();
}
