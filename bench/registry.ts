/**
 * bench/registry: the platform's OCI registry against Debian's
 * `docker-registry` (distribution 2.8) on loopback, side by side in one run:
 * push and pull of one large blob (default 256 MiB) and of many small blobs
 * (default 200 of 4 KiB), each upload a POST then a PUT with the whole body
 * (what every registry supports), each pull a GET read to its end.
 *
 *   npm run build && npx tsx bench/registry.ts [--mb 256] [--small 200] [--rounds 5]
 *
 * Both servers run in child processes, the load (undici) in this one; rounds
 * interleave the two; every round sends new content (no deduplication).
 * unihost answers with HTTP Basic auth on (its API token), docker-registry
 * with none. Figures: MiB/s for the large blob, operations/s for the small
 * ones; ratios unihost / docker-registry as the median and the worst round.
 */
import { fork } from 'node:child_process';
import { createHash } from 'node:crypto';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { startDockerRegistry } from '../test/helpers/docker-registry.js';

const { values } = parseArgs({
  options: {
    mb: { type: 'string', default: '256' },
    small: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '5' },
  },
});
const MB = Number(values.mb);
const SMALL = Number(values.small);
const ROUNDS = Number(values.rounds);
const CHUNK = 1024 * 1024;
const agent = new Agent({ connections: 4 });

interface Target {
  name: string;
  base: string;
  auth: Record<string, string>;
}

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

interface Figures {
  pushMiBs: number;
  pullMiBs: number;
  smallPushOps: number;
  smallPullOps: number;
}

async function round(t: Target, r: number): Promise<Figures> {
  const stamp = `${t.name}-${r}-${Date.now()}`;
  const big = digestOf(stamp, MB);
  let t0 = performance.now();
  await upload(t, 'bench/big', chunks(stamp, MB), big, MB * CHUNK);
  const push = performance.now() - t0;
  t0 = performance.now();
  const got = await download(t, 'bench/big', big);
  const pull = performance.now() - t0;
  if (got !== MB * CHUNK) throw new Error(`${t.name}: pulled ${got} bytes`);
  const small = Array.from({ length: SMALL }, (_, i) => Buffer.from(`${stamp} small ${i} `.padEnd(4096, '.')));
  const digests = small.map((b) => `sha256:${createHash('sha256').update(b).digest('hex')}`);
  t0 = performance.now();
  for (let i = 0; i < SMALL; i++) await upload(t, 'bench/small', small[i]!, digests[i]!, small[i]!.length);
  const sp = performance.now() - t0;
  t0 = performance.now();
  for (const d of digests) await download(t, 'bench/small', d);
  const sl = performance.now() - t0;
  return {
    pushMiBs: MB / (push / 1000),
    pullMiBs: MB / (pull / 1000),
    smallPushOps: SMALL / (sp / 1000),
    smallPullOps: SMALL / (sl / 1000),
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const child = fork(new URL('./servers/registry.mjs', import.meta.url).pathname, [], {
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
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
  };
  const dr: Target = { name: 'docker-registry', base: `http://${docker.host}`, auth: {} };
  // unihost repositories are <user>/<app>: the user is named `bench`, so `bench/big` is its own
  const rows: { u: Figures; d: Figures }[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const u = await round(unihost, r).catch((e: Error) => {
      throw new Error(`unihost round ${r}: ${e.message}`);
    });
    const d = await round(dr, r);
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
} finally {
  await docker.stop();
  child.disconnect();
  await agent.close();
}
