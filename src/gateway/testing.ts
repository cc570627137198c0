/**
 * Test fixtures for the gateway: host-side backends standing in for guests
 * (HTTP and raw TCP, two "instances" on 127.0.0.2/127.0.0.3 sharing one
 * destination port as real instances do), a gateway on 127.0.0.1 with free
 * ports, and small HTTP/TLS clients.
 */
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import pino from 'pino';
import { ensureLocalCa, type LocalCa } from './ca.js';
import { HaproxyDataPlane, type HaproxyPlaneOptions } from './haproxy/plane.js';
import type { Backend, Route } from './types.js';

export const METRO = 'unihost.test';
export const silent = pino({ level: process.env.GATEWAY_TEST_LOG ?? 'silent' });

let caPromise: Promise<LocalCa> | undefined;
export function testCa(): Promise<LocalCa> {
  caPromise ??= mkdtemp(path.join(tmpdir(), 'uh-gw-ca-')).then((d) => {
    // one CA per test process, removed when the process ends
    process.once('exit', () => rmSync(d, { recursive: true, force: true }));
    return ensureLocalCa(d, METRO);
  });
  return caPromise;
}

export interface TestBackend {
  id: string;
  host: string;
  port: number;
  /** sockets currently open to this backend */
  open(): number;
  /** release responses held by GET /hold */
  release(): void;
  /** requests to /drop it received (it closes their connection without an answer) */
  dropped(): number;
  close(): Promise<void>;
}

/** An HTTP backend answering JSON about the request; /hold, /reset, /drop, /big and Upgrade are special. */
function httpHandler(id: string, held: Array<() => void>, drops: { n: number }): http.RequestListener {
  return (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (url.pathname === '/hold') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write(`${id}:held\n`);
        held.push(() => res.end('done\n'));
        return;
      }
      if (url.pathname === '/reset') {
        res.writeHead(200, { 'content-length': '100000' });
        res.write('partial');
        setTimeout(() => req.socket.destroy(), 20);
        return;
      }
      if (url.pathname === '/drop') {
        drops.n++;
        req.socket.destroy();
        return;
      }
      if (url.pathname === '/big') {
        const n = Number(url.searchParams.get('n') ?? '1000000');
        res.writeHead(200, { 'content-length': String(n) });
        res.end(Buffer.alloc(n, 'x'));
        return;
      }
      const body = JSON.stringify({
        b: id,
        method: req.method,
        url: req.url,
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      });
      res.writeHead(200, { 'content-type': 'application/json', 'x-backend': id, 'set-cookie': ['a=1', 'b=2'] });
      res.end(body);
    });
  };
}

/** Answers a WebSocket handshake properly, then echoes raw bytes prefixed with the backend id. */
function onUpgrade(id: string): (req: http.IncomingMessage, s: net.Socket) => void {
  return (req, s) => {
    const accept = createHash('sha1')
      .update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest('base64');
    s.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\nX-Seen-Xff: ${req.headers['x-forwarded-for']}\r\n\r\n`,
    );
    s.on('data', (d: Buffer) => s.write(`${id}:${d.toString()}`));
    s.on('end', () => s.end()); // the client went away: close our side too, as WebSocket servers do
    s.on('error', () => {});
  };
}

function tcpHandler(id: string): (s: net.Socket) => void {
  return (s) => {
    s.write(`hello from ${id}\n`);
    s.on('data', (d: Buffer) => s.write(`${id}:${d.toString()}`));
    s.on('error', () => {});
  };
}

function serve(kind: 'http' | 'tcp', id: string, host: string, port: number): Promise<TestBackend> {
  const held: Array<() => void> = [];
  const drops = { n: 0 };
  const sockets = new Set<net.Socket>();
  let server: net.Server;
  if (kind === 'http') {
    const h = http.createServer(httpHandler(id, held, drops));
    h.on('upgrade', onUpgrade(id));
    server = h;
  } else server = net.createServer(tcpHandler(id));
  server.on('connection', (s: net.Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => {
      const p = (server.address() as net.AddressInfo).port;
      resolve({
        id,
        host,
        port: p,
        open: () => sockets.size,
        release: () => held.splice(0).forEach((f) => f()),
        dropped: () => drops.n,
        close: () =>
          new Promise((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}

/** Two backends ("instances" a and b) on 127.0.0.2 and 127.0.0.3, same port. */
export async function backendPair(kind: 'http' | 'tcp', prefix: string): Promise<[TestBackend, TestBackend]> {
  for (let tries = 0; ; tries++) {
    const a = await serve(kind, `${prefix}a`, '127.0.0.2', 0);
    try {
      return [a, await serve(kind, `${prefix}b`, '127.0.0.3', a.port)];
    } catch (e) {
      await a.close();
      if (tries > 20) throw e;
    }
  }
}

/**
 * A mutable backends() table: instance id -> state, per group. Like the
 * gateway controller after a store change, a change is pushed to the data
 * plane that `startGateway` attached (the promise resolves once applied).
 */
export class BackendTable {
  readonly groups = new Map<string, Backend[]>();
  /** set by startGateway: re-applies the current routes */
  onChange: () => Promise<unknown> = () => Promise.resolve();
  set(groupId: string, backends: TestBackend[], state: Backend['state'] = 'running'): Promise<unknown> {
    this.groups.set(
      groupId,
      backends.map((b) => ({ instanceId: b.id, host: b.host, state })),
    );
    return this.onChange();
  }
  setState(instanceId: string, state: Backend['state']): Promise<unknown> {
    for (const list of this.groups.values()) for (const b of list) if (b.instanceId === instanceId) b.state = state;
    return this.onChange();
  }
  /** how many times the plane read the table (a test can wait for an apply to have read it) */
  reads = 0;
  get = (groupId: string): Backend[] => {
    this.reads++;
    return this.groups.get(groupId) ?? [];
  };
}

/**
 * A started HAProxy data plane on 127.0.0.1 with free ports, the test CA's
 * wildcard certificate, its files in `dataDir` and its stats read every 50 ms.
 */
export async function testPlane(
  dataDir: string,
  table: BackendTable,
  extra: Partial<HaproxyPlaneOptions> = {},
): Promise<HaproxyDataPlane> {
  const ca = await testCa();
  const p = new HaproxyDataPlane({
    dataDir,
    listenHost: '127.0.0.1',
    portMap: () => 0,
    tls: { cert: ca.cert, key: ca.key },
    metroDomain: METRO,
    backends: table.get,
    log: silent,
    statsIntervalMs: 50,
    ...extra,
  });
  await p.start();
  return p;
}

/** `testPlane` in a temp dir (removed on close) with `routes` applied; `table` changes are applied to it. */
export async function startGateway(
  routes: Route[],
  table: BackendTable,
  extra: Partial<HaproxyPlaneOptions> = {},
): Promise<HaproxyDataPlane> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'uh-gw-haproxy-'));
  const gw = await testPlane(dataDir, table, extra);
  let current = routes;
  const setRoutes = gw.setRoutes.bind(gw);
  gw.setRoutes = (rs: Route[]) => {
    current = rs;
    return setRoutes(rs);
  };
  table.onChange = () => setRoutes(current);
  const close = gw.close.bind(gw);
  gw.close = async (c?: { keep?: boolean }) => {
    await close(c);
    if (!c?.keep) await rm(dataDir, { recursive: true, force: true });
  };
  const res = await gw.setRoutes(routes);
  for (const r of res) if (r.error) throw new Error(`port ${r.port}: ${r.error}`);
  return gw;
}

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One HTTP(S) request on a fresh connection to the gateway; `host` is the Host header (and SNI). */
export async function request(
  port: number,
  host: string,
  p = '/',
  o: { method?: string; body?: string; tls?: boolean; headers?: Record<string, string>; agent?: http.Agent } = {},
): Promise<Reply> {
  const ca = o.tls ? (await testCa()).caCert : undefined;
  const mod = o.tls ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(
      {
        host: '127.0.0.1',
        port,
        path: p,
        method: o.method ?? 'GET',
        headers: { host, ...o.headers },
        servername: o.tls ? host : undefined,
        ca,
        agent: o.agent ?? false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(o.body);
  });
}

/** A TLS connection to the gateway trusting the test CA; rejects with the handshake error. */
export async function tlsConnect(
  port: number,
  servername: string,
  o: tls.ConnectionOptions = {},
): Promise<tls.TLSSocket> {
  const ca = (await testCa()).caCert;
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, servername, ca, ...o }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Reads from a socket until `pred` holds for what arrived. */
export function readUntil(s: net.Socket, pred: (text: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (d: Buffer): void => {
      text += d.toString();
      if (pred(text)) {
        s.removeListener('data', onData);
        resolve(text);
      }
    };
    s.on('data', onData);
    s.once('error', reject);
    s.once('close', () => resolve(text));
  });
}

export const route = (
  groupId: string,
  port: number,
  destinationPort: number,
  handlers: string[],
  fqdns: string[],
  userId = 'u1',
): Route => ({
  groupId,
  userId,
  port,
  destinationPort,
  handlers,
  fqdns,
});

export const until = async (pred: () => boolean, what: string, ms = 5000): Promise<void> => {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};
