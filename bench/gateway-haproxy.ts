/**
 * bench/gateway's HAProxy side: the data plane on HAProxy in its own child
 * process, and the route change latencies of a data plane (an instance
 * becomes running → the first request that reaches it; a new group with a
 * new name → its first request).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { cp, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { HaproxyDataPlane } from '../src/gateway/haproxy/plane.js';
import { DEFAULTS } from '../src/config.js';
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
export async function haproxyChild(msg: { cert: string; key: string; backend: Ports; snapshot: string }): Promise<
  Ports & {
    routeMs: { median: number; max: number };
    groupMs: { median: number; max: number };
    config: string;
    pid: number;
  }
> {
  const table = new Map<string, Backend[]>([
    ['g', [{ instanceId: 'i1', host: '127.0.0.1', state: 'running' }]],
    ['t', [{ instanceId: 'i2', host: '127.0.0.1', state: 'running' }]],
  ]);
  const dataDir = await mkdtemp(path.join(tmpdir(), 'uh-bench-haproxy-'));
  const plane = new HaproxyDataPlane({
    dataDir,
    listenHost: '127.0.0.1',
    portMap: () => 0,
    tls: { cert: msg.cert, key: msg.key },
    metroDomain: 'bench.test',
    backends: (g) => table.get(g) ?? [],
    log: pino({ level: 'warn' }),
    threads: 1,
    // as the daemon runs it: in its cgroup with the configured CPU weight (docs/gateway.md)
    cpuWeight: DEFAULTS.gateway.cpuWeight,
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
  await plane.setRoutes(routes);
  // the configuration as the daemon renders it for these routes, servers included, for the variants
  const config = await snapshot(path.join(dataDir, 'haproxy'), msg.snapshot);
  const routeMs = await routeChange(plane, table, routes, msg.backend.http);
  await plane.setRoutes(routes);
  const groupMs = await groupCreate(plane, table, routes, msg.backend.http);
  const pid = Number((await readFile(path.join(dataDir, 'haproxy', 'haproxy.pid'), 'utf8')).trim());
  return {
    http: plane.boundPort(80)!,
    tls: plane.boundPort(443)!,
    tcp: plane.boundPort(8443)!,
    routeMs,
    groupMs,
    config,
    pid,
  };
}

/**
 * Copies the rendered configuration with its maps and certificates to
 * `to`; returns its text with paths pointing there and without the stats
 * socket (the copies run as plain, separate HAProxy processes).
 */
async function snapshot(from: string, to: string): Promise<string> {
  await cp(from, to, { recursive: true, filter: (src) => !/\.(sock|pid)$/.test(src) });
  const text = await readFile(path.join(to, 'haproxy.cfg'), 'utf8');
  return text
    .split(from)
    .join(to)
    .split('\n')
    .filter((l) => !/^\s*stats socket /.test(l))
    .join('\n');
}

/** Ports of a HAProxy under test, in the order of the `bind` lines of its public frontends. */
export interface StaticHaproxy {
  proc: ChildProcess;
  ports: Ports;
}

/**
 * Runs `config` as its own HAProxy (foreground, no master), with each
 * public frontend's `bind 127.0.0.1:<port>` moved to a fresh port:
 * `p80`, `p443` and `p8443` answer as `http`, `tls` and `tcp`.
 */
export async function startStaticHaproxy(
  dir: string,
  name: string,
  config: string,
  run: (cmd: string, args: string[]) => [string, string[]] = (c, a) => [c, a],
): Promise<StaticHaproxy> {
  const ports = { http: await freePort(), tls: await freePort(), tcp: await freePort() };
  const byFrontend: Record<string, number> = { p80: ports.http, p443: ports.tls, p8443: ports.tcp };
  let frontend = '';
  const text = config
    .split('\n')
    .map((l) => {
      const f = /^frontend (\S+)/.exec(l);
      if (f) frontend = f[1]!;
      const port = byFrontend[frontend];
      return port !== undefined ? l.replace(/^(\s*bind 127\.0\.0\.1:)\d+/, `$1${port}`) : l;
    })
    .join('\n');
  const file = path.join(dir, `${name}.cfg`);
  await writeFile(file, text);
  // detached: a session (and so a scheduling group) of its own, like the gateway's HAProxy
  const proc = spawn(...run('haproxy', ['-db', '-f', file]), {
    stdio: ['ignore', 'ignore', 'inherit'],
    detached: true,
  });
  for (let i = 0; i < 100; i++) {
    if (await canConnect(ports.http)) return { proc, ports };
    await new Promise((r) => setTimeout(r, 50));
  }
  proc.kill();
  throw new Error(`HAProxy '${name}' did not start (config ${file})`);
}

/**
 * HAProxy's ceiling here: one thread, routing by Host (SNI for the TCP
 * stream) to the same backend, and nothing else (no limits, rewrites,
 * retries or fallbacks).
 */
export function minimalConfig(o: { pem: string; backend: Ports }): string {
  return `global
  nbthread 1
defaults
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
frontend p80
  mode http
  bind 127.0.0.1:0
  use_backend web if { req.hdr(host) -m str ${HOST} }
frontend p443
  mode http
  bind 127.0.0.1:0 ssl crt ${o.pem} alpn h2,http/1.1
  use_backend web if { req.hdr(host) -m str ${HOST} }
frontend p8443
  mode tcp
  bind 127.0.0.1:0 ssl crt ${o.pem}
  use_backend stream if { ssl_fc_sni -m str ${HOST} }
backend web
  mode http
  http-reuse safe
  server s 127.0.0.1:${o.backend.http}
backend stream
  mode tcp
  server s 127.0.0.1:${o.backend.tcp}
`;
}

/**
 * The rule groups of unihost's configuration that bench/gateway switches
 * off one at a time, each as the lines that make it. A group that matches
 * no line means the configuration changed under the bench: it says so.
 */
export const RULE_GROUPS: Record<string, RegExp> = {
  '431 check': /status 431/,
  retries: /^\s*(retries |option redispatch|retry-on |http-request disable-l7-retry)/,
  'X-Forwarded-*': /x-forwarded-|^\s*option forwardfor/,
  'activator fallback':
    /^\s*use_backend uh_activator_\d+ if \{ var\(txn\.be\)|^\s*server uh_activator |x-unihost-port \d+ if /,
};

/** `config` without the lines of one rule group ('' removes none: the copy as rendered; 'all' every group). */
export function withoutGroup(config: string, group: string): string {
  if (group === '') return config;
  if (group === 'all') return Object.keys(RULE_GROUPS).reduce(withoutGroup, config);
  const re = RULE_GROUPS[group]!;
  const lines = config.split('\n');
  const kept = lines.filter((l) => !re.test(l));
  if (kept.length === lines.length)
    throw new Error(`bench/gateway: no line of '${group}' in the rendered configuration`);
  return kept.join('\n');
}

export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const p = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return p;
}

export function canConnect(port: number): Promise<boolean> {
  return new Promise((r) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.destroy();
      r(true);
    });
    s.on('error', () => r(false));
  });
}
