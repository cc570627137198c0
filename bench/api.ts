/**
 * bench/api: requests/s and p99 latency of the unihost API against a bare
 * Fastify route returning a same-size JSON body, side by side in one run.
 *
 *   npm run build && npx tsx bench/api.ts [--instances 10000] [--seconds 10] [--connections 10]
 *
 * The servers run in child processes (one at a time) so the load generator
 * (autocannon, in this process) does not share their event loop.
 */
import autocannon from 'autocannon';
import { fork, type ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    instances: { type: 'string', default: '10000' },
    seconds: { type: 'string', default: '10' },
    connections: { type: 'string', default: '10' },
  },
});

interface Ready {
  url: string;
  token?: string;
  name?: string;
}

/** Starts one server script of bench/servers in its own process (plain Node, compiled code). */
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

async function load(url: string, headers: Record<string, string>) {
  const r = await autocannon({
    url,
    connections: Number(values.connections),
    duration: Number(values.seconds),
    headers,
  });
  return {
    rps: r.requests.average,
    p99: r.latency.p99,
    p50: r.latency.p50,
    errors: r.errors + r.non2xx,
    bytes: r.throughput.average,
  };
}

async function main(): Promise<void> {
  const api = await spawnServer('api.mjs', [String(values.instances)]);
  const auth = { authorization: `Bearer ${api.ready.token}` };
  const oneUrl = `${api.ready.url}/v1/instances?name=${api.ready.name}`;
  const listUrl = `${api.ready.url}/v1/instances/list`;
  const one = (await (await fetch(oneUrl, { headers: auth })).json()) as Record<string, unknown>;
  const list = (await (await fetch(listUrl, { headers: auth })).json()) as Record<string, unknown>;
  if (one.status !== 'success' || list.status !== 'success') throw new Error('API warm-up request failed');
  console.log(
    `# ${values.instances} instances in the store; ${values.connections} connections, ${values.seconds}s per run`,
  );
  const apiOne = await load(oneUrl, auth);
  const apiList = await load(listUrl, auth);
  // The server removes its temp data dir and exits when the IPC channel closes.
  const apiExit = new Promise((r) => api.child.once('exit', r));
  api.child.disconnect();
  await apiExit;

  const bare = await spawnServer('bare.mjs', [], { one, list });
  const bareOne = await load(`${bare.ready.url}/one`, {});
  const bareList = await load(`${bare.ready.url}/list`, {});
  bare.child.kill();

  const row = (name: string, a: Awaited<ReturnType<typeof load>>, b: Awaited<ReturnType<typeof load>>) =>
    console.log(
      `${name.padEnd(28)} api ${a.rps.toFixed(0).padStart(7)} req/s p99 ${String(a.p99).padStart(4)} ms | bare ${b.rps
        .toFixed(0)
        .padStart(
          7,
        )} req/s p99 ${String(b.p99).padStart(4)} ms | ratio ${(a.rps / b.rps).toFixed(2)} | errors ${a.errors + b.errors}`,
    );
  row('GET /v1/instances (by name)', apiOne, bareOne);
  row(`GET /v1/instances/list`, apiList, bareList);
  console.log(`# list body ${JSON.stringify(list).length} bytes; single body ${JSON.stringify(one).length} bytes`);
}

await main();
