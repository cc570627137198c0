/**
 * bench/api: requests/s and p99 latency of the unihost API against a bare
 * Fastify route returning a same-size JSON body, side by side in one run,
 * on SQLite and (`--store postgres`) on PostgreSQL; and the change feed's
 * latency from a commit in one process to a watcher in another.
 *
 *   npm run build && npx tsx bench/api.ts [--store postgres] [--instances 10000] [--seconds 5] [--rounds 3]
 *
 * The servers run in child processes, all started before the first round,
 * so the load generator (autocannon, in this process) does not share their
 * event loop and the rounds interleave them; each figure is reported as the
 * median and the worst of its rounds. PostgreSQL is a throwaway server on a
 * unix socket (test/helpers/postgres.ts), with the settings of a test
 * database (fsync off): the ratio compares the stores' code paths, not disks.
 */
import autocannon from 'autocannon';
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startTestPostgres } from '../test/helpers/postgres.js';

const { values } = parseArgs({
  options: {
    instances: { type: 'string', default: '10000' },
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '10' },
    store: { type: 'string', default: 'sqlite' },
    'feed-commits': { type: 'string', default: '300' },
  },
});
if (!['sqlite', 'postgres'].includes(values.store)) throw new Error('--store: sqlite or postgres');

interface Ready {
  url: string;
  token?: string;
  name?: string;
}

/** Starts one script of bench/servers in its own process (plain Node, compiled code). */
function spawnServer(script: string, args: string[], msg?: unknown): Promise<{ child: ChildProcess; ready: Ready }> {
  const child = fork(new URL(`./servers/${script}`, import.meta.url).pathname, args, {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  if (msg) child.send(msg as never);
  return new Promise((resolve, reject) => {
    child.once('message', (m) => resolve({ child, ready: m as Ready }));
    child.once('exit', (c) => reject(new Error(`${script} exited with ${c}`)));
  });
}

interface Load {
  rps: number;
  p99: number;
  errors: number;
}

async function load(url: string, headers: Record<string, string>, create = false): Promise<Load> {
  let k = 0;
  const tag = Math.random().toString(36).slice(2, 8);
  const r = await autocannon({
    url,
    connections: Number(values.connections),
    duration: Number(values.seconds),
    headers: { ...headers, 'content-type': 'application/json' },
    ...(create
      ? {
          requests: [
            {
              method: 'POST',
              setupRequest: (req) => ({
                ...req,
                body: JSON.stringify({ image: 'nginx:latest', name: `c-${tag}-${k++}` }),
              }),
            },
          ],
        }
      : {}),
  });
  return { rps: r.requests.average, p99: r.latency.p99, errors: r.errors + r.non2xx };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

interface Target {
  name: string;
  one: () => Promise<Load>;
  list: () => Promise<Load>;
  create: () => Promise<Load>;
}

async function apiTarget(
  name: string,
  storeUrl: string,
): Promise<{ t: Target; stop: () => Promise<void>; base: string; auth: Record<string, string>; name: string }> {
  const s = await spawnServer('api.mjs', [values.instances, storeUrl]);
  const auth = { authorization: `Bearer ${s.ready.token}` };
  const base = s.ready.url;
  return {
    base,
    auth,
    name: s.ready.name!,
    t: {
      name,
      one: () => load(`${base}/v1/instances?name=${s.ready.name}`, auth),
      list: () => load(`${base}/v1/instances/list`, auth),
      create: () => load(`${base}/v1/instances`, auth, true),
    },
    stop: async () => {
      const exit = new Promise((r) => s.child.once('exit', r));
      s.child.disconnect(); // the server removes its temp data dir and exits
      await exit;
    },
  };
}

/** Commit (one process) → watcher (another process): ms from the start of each committing transaction. */
async function feedLatency(storeUrl: string, sqlitePath: string): Promise<number[]> {
  const script = new URL('./servers/feed.mjs', import.meta.url).pathname;
  const watcher = fork(script, ['watch', storeUrl, sqlitePath], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const arrived = new Map<string, number>();
  await new Promise<void>((resolve) =>
    watcher.on('message', (m: { ready?: boolean; id?: string; at?: number }) => {
      if (m.ready) resolve();
      else if (m.id) arrived.set(m.id, m.at!);
    }),
  );
  const committer = fork(script, ['commit', storeUrl, sqlitePath, values['feed-commits']], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const began = new Map<string, number>();
  await new Promise<void>((resolve) =>
    committer.on('message', (m: { done?: boolean; id?: string; at?: number }) => {
      if (m.done) resolve();
      else if (m.id) began.set(m.id, m.at!);
    }),
  );
  await new Promise((r) => setTimeout(r, 500)); // the last ones' notifications
  watcher.disconnect();
  const out: number[] = [];
  for (const [id, t0] of began) out.push(arrived.has(id) ? arrived.get(id)! - t0 : Infinity);
  return out.sort((a, b) => a - b);
}

async function main(): Promise<void> {
  const pg = values.store === 'postgres' ? startTestPostgres() : undefined;
  const pgUrl = pg ? await pg.createDb() : '';
  const sqlite = await apiTarget('SQLite', '');
  const postgres = pg ? await apiTarget('PostgreSQL', pgUrl) : undefined;
  // the bare server's bodies are the API's own answers (the list: of as many instances)
  const get = async (path: string, init: RequestInit = {}) =>
    (await (
      await fetch(`${sqlite.base}${path}`, { headers: { ...sqlite.auth, 'content-type': 'application/json' }, ...init })
    ).json()) as unknown;
  const one = await get(`/v1/instances?name=${sqlite.name}`);
  const list = await get('/v1/instances/list');
  const created = await get('/v1/instances', {
    method: 'POST',
    body: JSON.stringify({ image: 'nginx:latest', name: 'probe' }),
  });
  const bareS = await spawnServer('bare.mjs', [], { one, list, created });
  const bare: Target = {
    name: 'bare Fastify',
    one: () => load(`${bareS.ready.url}/one`, {}),
    list: () => load(`${bareS.ready.url}/list`, {}),
    create: () => load(`${bareS.ready.url}/create`, {}, true),
  };
  const targets = [bare, sqlite.t, ...(postgres ? [postgres.t] : [])];
  const results = new Map<string, Load[]>();
  console.log(
    `# ${values.instances} instances in each store; ${values.connections} connections, ${values.seconds} s per figure, ${values.rounds} interleaved rounds`,
  );
  for (let round = 1; round <= Number(values.rounds); round++) {
    for (const kind of ['one', 'list', 'create'] as const)
      for (const t of targets) {
        const key = `${kind}:${t.name}`;
        results.set(key, [...(results.get(key) ?? []), await t[kind]()]);
      }
    console.log(`# round ${round} done`);
  }
  const label = { one: 'GET /v1/instances (by name)', list: 'GET /v1/instances/list', create: 'POST /v1/instances' };
  for (const kind of ['one', 'list', 'create'] as const) {
    const fig = (t: Target) => results.get(`${kind}:${t.name}`)!;
    const line = targets.map((t) => {
      const f = fig(t);
      return `${t.name} ${median(f.map((x) => x.rps)).toFixed(0)} req/s (worst ${Math.min(...f.map((x) => x.rps)).toFixed(0)}) p99 ${median(f.map((x) => x.p99))} ms`;
    });
    console.log(`${label[kind]}: ${line.join(' | ')}`);
    const ratio = (a: Target, b: Target) => {
      const rs = fig(a).map((x, i) => x.rps / fig(b)[i]!.rps);
      return `median ${median(rs).toFixed(2)} worst ${Math.min(...rs).toFixed(2)}`;
    };
    console.log(`  SQLite / bare: ${ratio(sqlite.t, bare)}`);
    if (postgres)
      console.log(`  PostgreSQL / SQLite: ${ratio(postgres.t, sqlite.t)} (goal >= 0.5 on GET by name and create)`);
    const errors = targets.reduce((n, t) => n + fig(t).reduce((m, x) => m + x.errors, 0), 0);
    if (errors > 0) console.log(`  errors: ${errors}`);
  }
  await sqlite.stop();
  await postgres?.stop();
  bareS.child.kill();

  const dir = mkdtempSync(join(tmpdir(), 'unihost-feed-'));
  try {
    const stores: [string, string][] = [
      ['SQLite', ''],
      ...(pg ? ([['PostgreSQL', await pg.createDb()]] as [string, string][]) : []),
    ];
    for (const [name, url] of stores) {
      const ms = await feedLatency(url, join(dir, 'feed.db'));
      const q = (p: number) => ms[Math.min(ms.length - 1, Math.floor(ms.length * p))]!;
      const lost = ms.filter((x) => x === Infinity).length;
      console.log(
        `change feed, commit in one process → watcher in another (${name}, ${ms.length} commits): p50 ${q(0.5).toFixed(1)} ms, p99 ${q(0.99).toFixed(1)} ms, max ${ms.at(-1)!.toFixed(1)} ms${lost ? `, ${lost} never arrived` : ''}${name === 'PostgreSQL' ? ' (goal p50 <= 10, p99 <= 50)' : " (SQLite: the poll of other processes' commits, every 100 ms)"}`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    pg?.close();
  }
}

await main();
