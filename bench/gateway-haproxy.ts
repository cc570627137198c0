/**
 * bench/gateway's HAProxy side: the data plane on HAProxy in its own child
 * process, and the route change latencies of a data plane (an instance
 * becomes running → the first request that reaches it; a new group with a
 * new name → its first request).
 */
import http from 'node:http';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { HaproxyDataPlane } from '../src/gateway/haproxy/plane.js';
import type { Backend, DataPlane, Route } from '../src/gateway/types.js';

export const HOST = 'bench-abcd1234.bench.test';
const LATE = 'late-abcd1234.bench.test';

interface Ports {
  http: number;
  tls: number;
  tcp: number;
}

export const benchRoute = (groupId: string, port: number, dst: number, handlers: string[], fqdn = HOST): Route => ({
  groupId,
  userId: 'u',
  port,
  destinationPort: dst,
  handlers,
  fqdns: [fqdn],
});

function status(port: number, host: string): Promise<number> {
  return new Promise((resolve) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', headers: { host }, agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      })
      .on('error', () => resolve(0));
  });
}

/** Median and worst of some latencies (ms). */
function spread(ms: number[]): { median: number; max: number } {
  const s = [...ms].sort((a, b) => a - b);
  return { median: s[Math.floor(s.length / 2)]!, max: s[s.length - 1]! };
}

/** Polls `host` on `port` until it answers 200; ms since `t0`. */
async function until200(port: number, host: string, t0: number, what: string): Promise<number> {
  while ((await status(port, host)) !== 200) {
    if (performance.now() - t0 > 10_000) throw new Error(`${what} took over 10 s`);
  }
  return performance.now() - t0;
}

/**
 * Route change latency: group `late` on port 81 has no instance; at t0 its
 * instance is marked running and the data plane told (what the gateway
 * controller does on a store change); the figure is t0 → the first 200.
 * Median and worst of `rounds`.
 */
export async function routeChange(
  plane: DataPlane,
  table: Map<string, Backend[]>,
  routes: Route[],
  backendHttp: number,
  rounds = 10,
): Promise<{ median: number; max: number }> {
  const all = [...routes, benchRoute('late', 81, backendHttp, ['http'], LATE)];
  const ms: number[] = [];
  for (let i = 0; i < rounds; i++) {
    table.set('late', []);
    await plane.setRoutes(all);
    const port = plane.boundPort(81)!;
    while ((await status(port, LATE)) === 200) await new Promise((r) => setTimeout(r, 5));
    const t0 = performance.now();
    table.set('late', [{ instanceId: `late-${i}`, host: '127.0.0.1', state: 'running' }]);
    void plane.setRoutes(all);
    ms.push(await until200(port, LATE, t0, 'route change'));
  }
  return spread(ms);
}

/**
 * Group creation latency: at t0 a new group with a running instance and a
 * name never routed before joins port 80 beside the others (what creating
 * an instance with a service group does); t0 → its first 200. The group is
 * removed again after each round. Median and worst of `rounds`.
 */
export async function groupCreate(
  plane: DataPlane,
  table: Map<string, Backend[]>,
  routes: Route[],
  backendHttp: number,
  rounds = 10,
): Promise<{ median: number; max: number }> {
  const ms: number[] = [];
  const port = plane.boundPort(80)!;
  for (let i = 0; i < rounds; i++) {
    const g = `new${i}`;
    const name = `new${i}-abcd1234.bench.test`;
    table.set(g, [{ instanceId: `new-${i}`, host: '127.0.0.1', state: 'running' }]);
    const t0 = performance.now();
    void plane.setRoutes([...routes, benchRoute(g, 80, backendHttp, ['http'], name)]);
    ms.push(await until200(port, name, t0, 'group creation'));
    await plane.setRoutes(routes);
    table.delete(g);
  }
  return spread(ms);
}

/** Child: the HAProxy data plane routing HOST (one thread, like nginx's one worker). */
export async function haproxyChild(msg: {
  cert: string;
  key: string;
  backend: Ports;
}): Promise<Ports & { routeMs: { median: number; max: number }; groupMs: { median: number; max: number } }> {
  const table = new Map<string, Backend[]>([
    ['g', [{ instanceId: 'i1', host: '127.0.0.1', state: 'running' }]],
    ['t', [{ instanceId: 'i2', host: '127.0.0.1', state: 'running' }]],
  ]);
  const plane = new HaproxyDataPlane({
    dataDir: await mkdtemp(path.join(tmpdir(), 'uh-bench-haproxy-')),
    listenHost: '127.0.0.1',
    portMap: () => 0,
    tls: { cert: msg.cert, key: msg.key },
    metroDomain: 'bench.test',
    backends: (g) => table.get(g) ?? [],
    log: pino({ level: 'warn' }),
    threads: 1,
  });
  await plane.start();
  const stop = (): void => void plane.close().finally(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('disconnect', stop);
  const routes = [
    benchRoute('g', 80, msg.backend.http, ['http']),
    benchRoute('g', 443, msg.backend.http, ['tls', 'http']),
    benchRoute('t', 8443, msg.backend.tcp, ['tls']),
  ];
  const routeMs = await routeChange(plane, table, routes, msg.backend.http);
  await plane.setRoutes(routes);
  const groupMs = await groupCreate(plane, table, routes, msg.backend.http);
  return { http: plane.boundPort(80)!, tls: plane.boundPort(443)!, tcp: plane.boundPort(8443)!, routeMs, groupMs };
}
