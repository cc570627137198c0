import http, { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type net from 'node:net';
import type { Logger } from 'pino';
import { normalizeHost, redirectHttps, RETRY_AFTER_S, sendText } from '../answers.js';
import type { Backend, Route } from '../types.js';
import { connectWithRetries, type ConnectPolicy } from './connect.js';
import { listenLoopback } from './loopback.js';

const ACME_PREFIX = '/.well-known/acme-challenge/';

/**
 * How a request reached the activator: `fallback`, a port's default backend
 * (names not in its map, ACME HTTP-01, routes without HTTP); `backup`, the
 * backup server of a group's backend that has no usable instance (HAProxy
 * counted the request in the group's backend already).
 */
export type ActivatorPath = 'fallback' | 'backup';

export interface ActivatorOptions {
  routes: () => Map<number, Map<string, Route>>;
  backends(groupId: string): Backend[];
  onNoBackend?(groupId: string): Promise<boolean>;
  acmeChallenge?(host: string, token: string): string | undefined;
  /** a group's request answered here (no instance): its bytes, for the group's counters */
  onAnswered?(groupId: string, bytesIn: number, bytesOut: number): void;
  /** a woken group's request forwarded from here to an instance: open until the returned function is called */
  onForward?(groupId: string, instanceId: string): () => void;
  /** how a woken instance is connected to (HAProxy's own connect timeout and retries) */
  connect: ConnectPolicy;
  log: Logger;
}

/**
 * What HAProxy cannot do itself, as local HTTP backends on 127.0.0.1 it
 * routes to: ACME HTTP-01 answers, the texts for unknown names, and groups
 * without a usable instance. For those it asks `onNoBackend` (scale to zero
 * wakes an instance there); when that says one runs now, this request is
 * forwarded to it from here (later ones go through HAProxy, which got the
 * server in the meantime); otherwise a 503 with Retry-After.
 *
 * One listener per public port and path: the address HAProxy connects to
 * says which port and path a request came by, so HAProxy adds no header and
 * evaluates no rule for it on the way (the backup server is only used when
 * the group has no usable instance).
 */
export class Activator {
  private readonly listeners = new Map<string, { server: http.Server; port: Promise<number> }>();

  constructor(private readonly o: ActivatorOptions) {}

  /** The listener's port for requests of public port `publicPort` coming by `path`; opened on first use. */
  portFor(publicPort: number, path: ActivatorPath): Promise<number> {
    const key = `${publicPort}/${path}`;
    let l = this.listeners.get(key);
    if (!l) {
      const server = http.createServer(
        { keepAliveTimeout: 5000 },
        (req, res) => void this.onRequest(req, res, publicPort, path),
      );
      server.on('upgrade', (req: IncomingMessage, s: net.Socket) => {
        const status = 503;
        s.end(
          `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nRetry-After: ${RETRY_AFTER_S}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
        );
      });
      l = { server, port: listenLoopback(server) };
      this.listeners.set(key, l);
      l.port.catch(() => this.listeners.delete(key));
    }
    return l.port;
  }

  /** Closes the listeners of public ports no longer published. */
  keep(publicPorts: Set<number>): void {
    for (const [key, l] of this.listeners) {
      if (publicPorts.has(Number(key.split('/')[0]))) continue;
      l.server.closeAllConnections();
      l.server.close();
      this.listeners.delete(key);
    }
  }

  async close(): Promise<void> {
    const all = [...this.listeners.values()];
    this.listeners.clear();
    await Promise.all(
      all.map(async (l) => {
        l.server.closeAllConnections();
        await new Promise<void>((r) => l.server.close(() => r()));
      }),
    );
  }

  private async onRequest(req: IncomingMessage, res: ServerResponse, port: number, path: ActivatorPath): Promise<void> {
    const host = normalizeHost(req.headers.host);
    const url = req.url ?? '/';
    if (this.o.acmeChallenge && host !== undefined && url.startsWith(ACME_PREFIX)) {
      const answer = this.o.acmeChallenge(host, url.slice(ACME_PREFIX.length));
      if (answer !== undefined) return sendText(res, 200, answer);
    }
    const route = host === undefined ? undefined : this.o.routes().get(port)?.get(host);
    if (!route || host === undefined)
      return sendText(res, 404, `unihost: no service is published at ${host ?? 'this address'} on port ${port}.`);
    if (!route.handlers.includes('http')) return sendText(res, 404, `unihost: ${host} does not serve HTTP here.`);
    if (route.handlers.includes('redirect')) return redirectHttps(req, res, host);
    // bytes since the previous request on this (kept-alive) connection
    const sock = req.socket as net.Socket & { _uhIn?: number; _uhOut?: number };
    res.once('close', () => {
      if (path === 'backup') return; // HAProxy counted it in the group's backend
      const inB = sock.bytesRead - (sock._uhIn ?? 0);
      const outB = sock.bytesWritten - (sock._uhOut ?? 0);
      sock._uhIn = sock.bytesRead;
      sock._uhOut = sock.bytesWritten;
      this.o.onAnswered?.(route.groupId, inB, outB);
    });
    const woke = this.o.onNoBackend ? await this.o.onNoBackend(route.groupId).catch(() => false) : false;
    const b = woke ? this.o.backends(route.groupId).find((x) => x.state === 'running') : undefined;
    if (woke && !b) this.o.log.warn({ group: route.groupId }, 'gateway: woken, yet no running instance in the table');
    if (!b)
      return sendText(res, 503, 'unihost: this service is unavailable: no instance of it is running.', {
        'retry-after': String(RETRY_AFTER_S),
      });
    this.forward(req, res, b, route.destinationPort, route.groupId);
  }

  /** Sends a woken group's first request to the instance that now runs (counted open until answered). */
  private forward(req: IncomingMessage, res: ServerResponse, b: Backend, port: number, groupId: string): void {
    const done = this.o.onForward?.(groupId, b.instanceId);
    if (done) res.once('close', done);
    const failed = (e: Error): void => {
      this.o.log.warn(
        { instance: b.instanceId, err: e.message },
        'gateway: activator could not reach the woken instance',
      );
      if (!res.headersSent) sendText(res, 502, 'unihost: the service did not answer.');
      else res.destroy();
    };
    // connected first, each try bounded: the request's body is sent on the connection that answered
    connectWithRetries(b.host, port, {
      ...this.o.connect,
      onRetry: (e) =>
        this.o.log.info(
          { instance: b.instanceId, err: e.message },
          'gateway: a connect to the woken instance is made again',
        ),
    }).then((sock) => {
      if (res.destroyed) return void sock.destroy();
      const up = http.request(
        {
          host: b.host,
          port,
          method: req.method,
          path: req.url,
          headers: { ...req.headers },
          createConnection: () => sock,
        },
        (ur) => {
          res.writeHead(ur.statusCode ?? 502, ur.headers);
          ur.pipe(res);
        },
      );
      up.on('error', failed);
      // HAProxy's `timeout server` bounds the wait for the answer: it closes its connection here, and this one goes
      res.once('close', () => up.destroy());
      req.pipe(up);
    }, failed);
  }
}
