/**
 * bench/gateway: the unihost gateway (the HAProxy data plane, configured as
 * the daemon configures it) against nginx as the same reverse proxy and
 * against HAProxy with a minimal configuration (routing by Host only: the
 * ceiling of HAProxy itself here), side by side in interleaved rounds of
 * one run; then what each of unihost's rule groups costs (the rendered
 * configuration run again with one group switched off at a time), a `perf`
 * profile of the gateway's HAProxy under load, and the latency of a route
 * change (instance running -> first request routed).
 *
 *   npx tsx bench/gateway.ts [--seconds 5] [--connections 50] [--mb 128] [--rounds 5] [--hog] [--out DIR]
 *
 * Each round measures keep-alive HTTP requests/s with p50/p99 (wrk: a C
 * load generator leaves the cores to the proxies), new TLS
 * connections/s (full handshakes, each with one request), and one large
 * transfer: HTTP on port 80 and TCP over TLS (stream mode). Ratios are taken
 * within each round; the report gives their median and worst round.
 * `--hog` keeps one core busy with a spinning process for the whole run
 * (both proxies share the machine with it). The report and the profile are
 * written to DIR (default bench/out/gateway-<time>).
 * The HTTP backend is nginx answering a short text (cheap per request, so the
 * proxies are what is measured), the TCP stream a Node process; gateway
 * (HAProxy, nbthread 1) and nginx (one worker) run in their own processes.
 * Needs nginx and its stream module, and wrk (Debian: nginx-light
 * libnginx-mod-stream wrk);
 * the profile needs `perf` (Debian: linux-perf) and is skipped, saying so, without it.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, writeFile, mkdir } from 'node:fs/promises';
import { execFile, execFileSync } from 'node:child_process';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { parseArgs } from 'node:util';
import { ensureLocalCa } from '../src/gateway/ca.js';
import {
  canConnect,
  freePort,
  haproxyChild,
  HOST,
  minimalConfig,
  RULE_GROUPS,
  startStaticHaproxy,
  withoutGroup,
} from './gateway-haproxy.js';

const BODY = 'hello from the backend\n';

interface Ports {
  http: number;
  tls: number;
  tcp: number;
  /** route change latency, ms (gateways only) */
  routeMs?: { median: number; max: number };
  /** group creation latency, ms (gateways only) */
  groupMs?: { median: number; max: number };
  /** the gateway's rendered configuration, pointing at a copy of its files */
  config?: string;
  /** the gateway's HAProxy master */
  pid?: number;
}

/** Child: the TCP blaster behind the TCP-over-TLS routes (and a Node HTTP server, unused by the figures). */
async function backendChild(msg: { cert: string; key: string; mb: number }): Promise<Ports> {
  const handler: http.RequestListener = (req, res) => {
    if (req.url?.startsWith('/big')) {
      res.writeHead(200, { 'content-length': String(msg.mb * 1024 * 1024) });
      blast(res, msg.mb);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
    res.end(BODY);
  };
  const h = http.createServer({ keepAliveTimeout: 60_000 }, handler);
  const s = https.createServer({ cert: msg.cert, key: msg.key, minVersion: 'TLSv1.2' }, handler);
  const t = net.createServer((c) => blast(c, msg.mb));
  return { http: await listen(h), tls: await listen(s), tcp: await listen(t) };
}

/** Writes `mb` MiB in 64 KiB chunks with backpressure, then ends. */
function blast(w: NodeJS.WritableStream, mb: number): void {
  const chunk = Buffer.alloc(64 * 1024, 'x');
  let left = mb * 16;
  const go = (): void => {
    while (left > 0) {
      left--;
      if (!w.write(chunk)) {
        w.once('drain', go);
        return;
      }
    }
    w.end();
  };
  go();
}

function listen(s: net.Server, port = 0): Promise<number> {
  return new Promise((r) => s.listen(port, '127.0.0.1', () => r((s.address() as net.AddressInfo).port)));
}

function child(role: string, msg: object): Promise<{ proc: ChildProcess; ports: Ports }> {
  const proc = fork(new URL(import.meta.url).pathname, ['child'], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  // the gateway's HAProxy, started by the child, inherits its CPU
  pin(proc.pid!, role === 'haproxy' ? 'proxy' : 'load');
  proc.send({ role, ...msg });
  return new Promise((resolve, reject) => {
    proc.once('message', (ports) => resolve({ proc, ports: ports as Ports }));
    proc.once('exit', (c) => reject(new Error(`${role} exited with ${c}`)));
  });
}

/**
 * The HTTP backend: nginx answering `/` with a short text and `/big` with an
 * `mb` MiB file, kept alive. Cheap per request, so that the proxies under
 * test, not the backend, are what the keep-alive figures measure.
 */
async function startBackendNginx(dir: string, mb: number): Promise<{ proc: ChildProcess; port: number }> {
  const root = path.join(dir, 'backend');
  await mkdir(root, { recursive: true });
  await writeFile(path.join(root, 'big'), Buffer.alloc(mb * 1024 * 1024, 'x'), { mode: 0o644 });
  // nginx's workers run as nobody: they read the file through dirs the bench made private
  await chmod(dir, 0o755);
  await chmod(root, 0o755);
  const port = await freePort();
  const conf = `
worker_processes 1;
daemon off;
pid ${root}/nginx.pid;
error_log stderr warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${root}; proxy_temp_path ${root}; fastcgi_temp_path ${root}; uwsgi_temp_path ${root}; scgi_temp_path ${root};
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  server {
    listen 127.0.0.1:${port};
    location = / { default_type text/plain; return 200 "${BODY.trim()}\\n"; }
    location = /big { root ${root}; default_type application/octet-stream; }
  }
}
`;
  const confPath = path.join(root, 'nginx.conf');
  await writeFile(confPath, conf);
  const proc = spawn(...on('load', 'nginx', ['-c', confPath, '-p', root]), { stdio: ['ignore', 'inherit', 'inherit'] });
  for (let i = 0; i < 100; i++) {
    if (await canConnect(port)) return { proc, port };
    await new Promise((r) => setTimeout(r, 50));
  }
  proc.kill();
  throw new Error('the backend nginx did not start');
}

async function startNginx(
  dir: string,
  certPath: string,
  keyPath: string,
  backend: Ports,
): Promise<{ proc: ChildProcess; ports: Ports }> {
  const ports = { http: await freePort(), tls: await freePort(), tcp: await freePort() };
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) await mkdir(path.join(dir, d), { recursive: true });
  const location = `
      location / {
        proxy_pass http://backend;
        proxy_http_version 1.1;
        proxy_max_temp_file_size 0; # stream large bodies through memory buffers, as the gateway does
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $remote_addr;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_set_header X-Forwarded-Host $host;
      }`;
  const tlsConf = `ssl_certificate ${certPath}; ssl_certificate_key ${keyPath}; ssl_protocols TLSv1.2 TLSv1.3;`;
  const conf = `
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log stderr warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy; fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;
  keepalive_requests 100000;
  upstream backend { server 127.0.0.1:${backend.http}; keepalive 256; keepalive_requests 100000; }
  server { listen 127.0.0.1:${ports.http}; server_name ${HOST}; ${location} }
  server { listen 127.0.0.1:${ports.tls} ssl; server_name ${HOST}; ${tlsConf} ${location} }
}
stream {
  server { listen 127.0.0.1:${ports.tcp} ssl; ${tlsConf} proxy_pass 127.0.0.1:${backend.tcp}; }
}
`;
  const confPath = path.join(dir, 'nginx.conf');
  await writeFile(confPath, conf);
  const proc = spawn(...on('proxy', 'nginx', ['-c', confPath, '-p', dir]), {
    stdio: ['ignore', 'inherit', 'inherit'],
    detached: true, // a session of its own, as the gateway's HAProxy has (see SESSIONS)
  });
  for (let i = 0; i < 100; i++) {
    if (await canConnect(ports.http)) return { proc, ports };
    await new Promise((r) => setTimeout(r, 50));
  }
  proc.kill();
  throw new Error('nginx did not start');
}

interface Options {
  seconds: number;
  connections: number;
  mb: number;
  rounds: number;
  hog: boolean;
}

interface KeepAlive {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

interface Transfers {
  tlsPerSec: number;
  httpMBs: number;
  tcpMBs: number;
}

/** p-th percentile (0-100) of unsorted samples. */
function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return 0;
  const s = Float64Array.from(xs).sort();
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** A wrk latency figure ("812.00us", "1.23ms", "1.02s") in ms. */
function wrkMs(v: string): number {
  const m = /^([\d.]+)(us|ms|s)$/.exec(v.trim());
  if (!m) throw new Error(`wrk printed a latency it cannot read: ${v}`);
  return Number(m[1]) * { us: 0.001, ms: 1, s: 1000 }[m[2] as 'us' | 'ms' | 's'];
}

/**
 * Keep-alive requests/s and latency percentiles from wrk (one thread, C):
 * a load generator that costs little CPU leaves the cores to the proxies.
 */
async function keepAlive(port: number, seconds: number, connections: number): Promise<KeepAlive> {
  const out = await new Promise<string>((resolve, reject) => {
    execFile(
      ...on('load', 'wrk', [
        '-t1',
        `-c${connections}`,
        `-d${seconds}s`,
        '--latency',
        '-H',
        `Host: ${HOST}`,
        `http://127.0.0.1:${port}/`,
      ]),
      { encoding: 'utf8' },
      (e, stdout) => (e ? reject(e) : resolve(stdout)),
    );
  });
  const pct = (p: string) => wrkMs(new RegExp(`^\\s*${p}%\\s+(\\S+)`, 'm').exec(out)?.[1] ?? 'NaNus');
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1]);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const errors = non2xx + (sock ? sock.slice(1).reduce((n, x) => n + Number(x), 0) : 0);
  if (!(rps > 0)) throw new Error(`wrk gave no request rate:\n${out}`);
  return { rps, p50: pct('50'), p99: pct('99'), errors };
}

/**
 * Full TLS handshakes per second (no session resumption), 8 at a time, each
 * followed by one request so the proxy does its whole per-connection work.
 * (OpenSSL 3.0's s_time cannot send SNI, which the gateway requires.)
 */
async function tlsRate(port: number, seconds: number, ca: string): Promise<number> {
  const end = Date.now() + seconds * 1000;
  let n = 0;
  const one = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const s = tls.connect({ host: '127.0.0.1', port, servername: HOST, ca }, () => {
        s.write(`GET / HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\n\r\n`);
      });
      s.on('data', () => {});
      s.on('end', () => {
        n++;
        s.destroy();
        resolve();
      });
      s.on('error', reject);
    });
  const loop = async (): Promise<void> => {
    while (Date.now() < end) await one();
  };
  const t0 = Date.now();
  await Promise.all(Array.from({ length: 8 }, loop));
  return n / ((Date.now() - t0) / 1000);
}

/** MB/s of one large transfer: an HTTP download, or a raw stream (over TLS when `servername` is set). */
function transfer(port: number, how: 'http' | 'tcp' | 'tls', ca: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    let bytes = 0;
    const done = (): void => resolve(bytes / 1e6 / (Number(process.hrtime.bigint() - t0) / 1e9));
    if (how === 'http') {
      http
        .get({ host: '127.0.0.1', port, path: '/big', headers: { host: HOST }, agent: false }, (res) => {
          if (res.statusCode !== 200) {
            res.resume();
            return reject(new Error(`the download answered ${res.statusCode}`));
          }
          res.on('data', (d: Buffer) => (bytes += d.length));
          res.on('end', done);
        })
        .on('error', reject);
      return;
    }
    const s =
      how === 'tls' ? tls.connect({ host: '127.0.0.1', port, servername: HOST, ca }) : net.connect(port, '127.0.0.1');
    s.on('data', (d: Buffer) => (bytes += d.length));
    s.on('end', done);
    s.on('error', reject);
  });
}

interface Target {
  name: string;
  ports: Ports;
  tcpMode: 'tcp' | 'tls';
  /** also measured for TLS connections and transfers (the variants only for keep-alive) */
  full: boolean;
}

interface Round {
  ka: Map<string, KeepAlive>;
  tr: Map<string, Transfers>;
}

/**
 * `rounds` rounds; in each, every target's keep-alive figure back to back,
 * then the TLS and transfer figures of the full targets. The order flips
 * every round, so that load drift favours no target.
 */
async function measureRounds(
  targets: Target[],
  o: { seconds: number; connections: number; ca: string; rounds: number },
): Promise<Round[]> {
  const out: Round[] = [];
  for (let round = 1; round <= o.rounds; round++) {
    const order = round % 2 === 1 ? targets : [...targets].reverse();
    const r: Round = { ka: new Map(), tr: new Map() };
    for (const t of order) {
      process.stderr.write(`round ${round}/${o.rounds}: ${t.name} keep-alive HTTP\n`);
      r.ka.set(t.name, await keepAlive(t.ports.http, o.seconds, o.connections));
    }
    for (const t of order.filter((x) => x.full)) {
      process.stderr.write(`round ${round}/${o.rounds}: ${t.name} TLS connections and transfers\n`);
      r.tr.set(t.name, {
        tlsPerSec: await tlsRate(t.ports.tls, Math.max(3, Math.round(o.seconds / 2)), o.ca),
        httpMBs: await transfer(t.ports.http, 'http', o.ca),
        tcpMBs: await transfer(t.ports.tcp, t.tcpMode, o.ca),
      });
    }
    out.push(r);
  }
  return out;
}

/**
 * Where things run (`--pin`, on by default with 2 or more CPUs): the proxy
 * under test (nginx, each HAProxy, and the hog) on the last CPU, the load
 * generator, the backends and this process on the first. Without it every
 * figure moves by tens of percent with the scheduler's placement of four
 * busy processes on two cores; with it the proxies compete for one core of
 * their own (and with the hog, on `--hog`), which is what is compared.
 */
const layout = { pin: false, load: '0', proxy: '0' };

/*
 * SESSIONS: the gateway's HAProxy runs in a session of its own (the data
 * plane starts it detached), and with the kernel's autogroup scheduling a
 * session is a scheduling group: nginx, the HAProxy copies and the hog are
 * started detached too, so that every proxy competes with the hog as one
 * group against another, as the gateway does.
 */

/** `cmd args` to run on `cpu` (or as is without pinning). */
function on(cpu: 'load' | 'proxy', cmd: string, args: string[]): [string, string[]] {
  return layout.pin ? ['taskset', ['-c', layout[cpu], cmd, ...args]] : [cmd, args];
}

/** Moves a running process (all its threads) to `cpu`. */
function pin(pid: number, cpu: 'load' | 'proxy'): void {
  if (layout.pin) execFileSync('taskset', ['-a', '-pc', layout[cpu], String(pid)], { stdio: 'ignore' });
}

/** A CPU hog: one process spinning for the whole run (one core's worth of work), where the proxies run. */
function startHog(): ChildProcess {
  return spawn(...on('proxy', process.execPath, ['-e', 'for (;;) {}']), { stdio: 'ignore', detached: true });
}

/**
 * `perf record` of the gateway's HAProxy worker while it serves the
 * keep-alive load (a run of its own, not counted in the figures); the
 * report is written to `out`. Returns a line saying what was done.
 */
async function profile(
  masterPid: number,
  port: number,
  o: { seconds: number; connections: number },
  out: string,
): Promise<string> {
  try {
    execFileSync('perf', ['--version'], { stdio: 'ignore' });
  } catch {
    return 'profile: skipped, `perf` is not installed (Debian: linux-perf)';
  }
  const worker = execFileSync('pgrep', ['-P', String(masterPid), 'haproxy'], { encoding: 'utf8' })
    .trim()
    .split('\n')[0];
  if (!worker) return 'profile: skipped, no HAProxy worker found';
  const data = path.join(out, 'perf.data');
  const rec = spawn('perf', ['record', '-F', '999', '-g', '-p', worker, '-o', data, '--', 'sleep', String(o.seconds)], {
    stdio: 'ignore',
  });
  const recorded = new Promise((r) => rec.once('exit', r));
  await keepAlive(port, o.seconds, o.connections);
  await recorded;
  const report = execFileSync(
    'perf',
    ['report', '-i', data, '--stdio', '--no-children', '--sort', 'dso,symbol', '--percent-limit', '0.7', '-g', 'none'],
    { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, stdio: ['ignore', 'pipe', 'ignore'] },
  );
  const byDso = execFileSync(
    'perf',
    ['report', '-i', data, '--stdio', '--no-children', '--sort', 'dso', '-g', 'none'],
    {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      stdio: ['ignore', 'pipe', 'ignore'],
    },
  );
  await writeFile(path.join(out, 'perf-report.txt'), `${byDso}\n${report}`);
  return `profile: perf record -F 999 -g of the HAProxy worker under keep-alive load -> ${path.join(out, 'perf-report.txt')}`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      seconds: { type: 'string', default: '5' },
      connections: { type: 'string', default: '50' },
      mb: { type: 'string', default: '128' },
      rounds: { type: 'string', default: '5' },
      hog: { type: 'boolean', default: false },
      pin: { type: 'boolean', default: availableParallelism() >= 2 },
      out: { type: 'string' },
    },
  });
  const o: Options = {
    seconds: Number(values.seconds),
    connections: Number(values.connections),
    mb: Number(values.mb),
    rounds: Number(values.rounds),
    hog: values.hog,
  };
  if (values.pin) {
    Object.assign(layout, { pin: true, load: '0', proxy: String(availableParallelism() - 1) });
    pin(process.pid, 'load');
  }
  const out = values.out ?? path.join('bench', 'out', `gateway-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  await mkdir(out, { recursive: true });
  const dir = await mkdtemp(path.join(tmpdir(), 'uh-bench-gw-'));
  const ca = await ensureLocalCa(path.join(dir, 'ca'), 'bench.test');
  const pem = path.join(dir, 'bench.pem');
  await writeFile(pem, `${ca.cert}\n${ca.key}\n`);
  const procs: ChildProcess[] = [];
  try {
    const node = await child('backend', { cert: ca.cert, key: ca.key, mb: o.mb });
    procs.push(node.proc);
    const web = await startBackendNginx(dir, o.mb);
    procs.push(web.proc);
    const backend = { proc: node.proc, ports: { ...node.ports, http: web.port } };
    const nginx = await startNginx(dir, ca.certPath, ca.keyPath, backend.ports);
    procs.push(nginx.proc);
    const gw = await child('haproxy', {
      cert: ca.cert,
      key: ca.key,
      backend: backend.ports,
      snapshot: path.join(dir, 'rendered'),
    });
    procs.push(gw.proc);
    const config = gw.ports.config!;
    await writeFile(path.join(out, 'haproxy-unihost.cfg'), config);
    const minimal = await startStaticHaproxy(dir, 'minimal', minimalConfig({ pem, backend: backend.ports }), (c, a) =>
      on('proxy', c, a),
    );
    procs.push(minimal.proc);
    const variants: Target[] = [];
    // the copy as rendered (a separate process, like each variant: what the live one adds, e.g. its
    // stats polls, shows against it), then each group off in turn, then all of them
    for (const group of ['', ...Object.keys(RULE_GROUPS), 'all']) {
      const name = group === '' ? 'copy' : `-${group}`;
      const v = await startStaticHaproxy(dir, `without-${variants.length}`, withoutGroup(config, group), (c, a) =>
        on('proxy', c, a),
      );
      procs.push(v.proc);
      variants.push({ name, ports: v.ports, tcpMode: 'tls', full: false });
    }
    const hog = o.hog ? startHog() : undefined;
    if (hog) procs.push(hog);
    const direct = await keepAlive(backend.ports.http, o.seconds, o.connections);
    const rounds = await measureRounds(
      [
        { name: 'nginx', ports: nginx.ports, tcpMode: 'tls', full: true },
        { name: 'haproxy-min', ports: minimal.ports, tcpMode: 'tls', full: true },
        { name: 'unihost', ports: gw.ports, tcpMode: 'tls', full: true },
        ...variants,
      ],
      { seconds: o.seconds, connections: o.connections, ca: ca.caCert, rounds: o.rounds },
    );
    const lines = report(rounds, direct, variants, o);
    const prof = await profile(gw.ports.pid!, gw.ports.http, o, out);
    const r = gw.ports.routeMs!;
    const g = gw.ports.groupMs!;
    lines.push(
      prof,
      `route change (instance running -> first request routed to it), 10 rounds: median ${r.median.toFixed(1)} ms, worst ${r.max.toFixed(1)} ms (goal < 50 ms)`,
      `group created (new group and name on port 80 -> its first request), 10 rounds: median ${g.median.toFixed(1)} ms, worst ${g.max.toFixed(1)} ms (no reload: a spare backend)`,
    );
    console.log(lines.join('\n'));
    await writeFile(path.join(out, 'report.txt'), `${lines.join('\n')}\n`);
    console.log(`\nwritten to ${out}/ (report.txt, haproxy-unihost.cfg, perf-report.txt)`);
  } finally {
    for (const p of procs) p.kill();
  }
}

const median = (xs: number[]): number => percentile(xs, 50);

function report(rounds: Round[], direct: KeepAlive, variants: Target[], o: Options): string[] {
  const f = (x: number, d = 0) => x.toFixed(d).padStart(11);
  const ka = (name: string, k: keyof KeepAlive) => rounds.map((r) => r.ka.get(name)![k]);
  const tr = (name: string, k: keyof Transfers) => rounds.map((r) => r.tr.get(name)![k]);
  /** per-round ratio a/b of a figure */
  const ratio = (a: number[], b: number[]) => a.map((x, i) => x / b[i]!);
  const lines = [
    `bench/gateway: ${o.connections} keep-alive connections for ${o.seconds}s, ${o.mb} MiB transfers, ${o.rounds} interleaved rounds${o.hog ? ", a CPU hog on the proxies' core" : ', no hog'}${layout.pin ? `; proxies on CPU ${layout.proxy}, load generator and backends on CPU ${layout.load}` : '; not pinned'}`,
    `direct to the backend (once, for scale): ${direct.rps.toFixed(0)} req/s, p99 ${direct.p99.toFixed(2)} ms`,
    '',
    'medians over the rounds   ' + ['nginx', 'haproxy-min', 'unihost'].map((h) => h.padStart(11)).join(''),
  ];
  const row = (label: string, xs: (n: string) => number[], d = 0) =>
    `${label.padEnd(26)}${['nginx', 'haproxy-min', 'unihost'].map((n) => f(median(xs(n)), d)).join('')}`;
  lines.push(
    row('keep-alive HTTP req/s', (n) => ka(n, 'rps')),
    row('  p50 latency ms', (n) => ka(n, 'p50'), 2),
    row('  p99 latency ms', (n) => ka(n, 'p99'), 2),
    row('  errors', (n) => ka(n, 'errors')),
    row('new TLS connections/s', (n) => tr(n, 'tlsPerSec')),
    row('HTTP download MB/s', (n) => tr(n, 'httpMBs')),
    row('TCP stream over TLS MB/s', (n) => tr(n, 'tcpMBs')),
    '',
    'ratios, per round: median (worst) and each round; goal',
  );
  const goals: [string, number[], number, 'min' | 'max'][] = [
    ['keep-alive req/s unihost/nginx', ratio(ka('unihost', 'rps'), ka('nginx', 'rps')), 1.0, 'min'],
    ['keep-alive p99 unihost/nginx', ratio(ka('unihost', 'p99'), ka('nginx', 'p99')), 1.2, 'max'],
    ['req/s unihost/haproxy-min', ratio(ka('unihost', 'rps'), ka('haproxy-min', 'rps')), 0.9, 'min'],
    ['TCP over TLS unihost/nginx', ratio(tr('unihost', 'tcpMBs'), tr('nginx', 'tcpMBs')), 0.95, 'min'],
    ['HTTP download unihost/nginx', ratio(tr('unihost', 'httpMBs'), tr('nginx', 'httpMBs')), 1.0, 'min'],
    ['new TLS conn/s unihost/nginx', ratio(tr('unihost', 'tlsPerSec'), tr('nginx', 'tlsPerSec')), 1.0, 'min'],
    ['req/s haproxy-min/nginx', ratio(ka('haproxy-min', 'rps'), ka('nginx', 'rps')), 0, 'min'],
  ];
  for (const [what, xs, goal, dir] of goals) {
    const worst = dir === 'min' ? Math.min(...xs) : Math.max(...xs);
    const met =
      goal === 0
        ? ''
        : (dir === 'min' ? xs.every((x) => x >= goal) : xs.every((x) => x <= goal))
          ? 'met in every round'
          : 'NOT met in every round';
    const bound = goal === 0 ? '(reference)' : `${dir === 'min' ? '>=' : '<='} ${goal}: ${met}`;
    lines.push(
      `${what.padEnd(32)}${median(xs).toFixed(2)} (${worst.toFixed(2)})  [${xs.map((x) => x.toFixed(2)).join(' ')}]  ${bound}`,
    );
  }
  lines.push(
    '',
    "what unihost's rule groups cost: keep-alive req/s of the rendered configuration with a group switched off / as rendered (per round)",
  );
  lines.push(
    `  (the live gateway / its copy run as a plain process: ${median(ratio(ka('unihost', 'rps'), ka('copy', 'rps'))).toFixed(2)})`,
  );
  for (const v of variants.filter((x) => x.name !== 'copy')) {
    const xs = ratio(ka(v.name, 'rps'), ka('copy', 'rps'));
    lines.push(
      `  without ${v.name.slice(1).padEnd(22)}${median(xs).toFixed(2)}  [${xs.map((x) => x.toFixed(2)).join(' ')}]`,
    );
  }
  return lines;
}

// last: everything above is initialized before either side runs
if (process.argv[2] === 'child') {
  process.once('message', (m: { role: string }) => {
    const run = m.role === 'backend' ? backendChild(m as never) : haproxyChild(m as never);
    void run.then((ports) => process.send!(ports));
  });
} else {
  void main();
}
