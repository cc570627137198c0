import http, { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type net from 'node:net';
import type { Logger } from 'pino';
import { normalizeHost, redirectHttps, RETRY_AFTER_S, sendText } from '../answers.js';
import type { Backend, Route } from '../types.js';
import { listenLoopback } from './loopback.js';

const ACME_PREFIX = '/.well-known/acme-challenge/';
/** Set by HAProxy on the way to the activator: which public port the request came in on. */
const PORT_HEADER = 'x-unihost-port';

export interface ActivatorOptions {
  routes: () => Map<number, Map<string, Route>>;
  backends(groupId: string): Backend[];
  onNoBackend?(groupId: string): Promise<boolean>;
  acmeChallenge?(host: string, token: string): string | undefined;
  /** a group's request answered here (no instance): its bytes, for the group's counters */
  onAnswered?(groupId: string, bytesIn: number, bytesOut: number): void;
  log: Logger;
}

/**
 * What HAProxy cannot do itself, as a local HTTP backend on 127.0.0.1 it
 * routes to: ACME HTTP-01 answers, the texts for unknown names, and groups
 * without a usable instance. For those it asks `onNoBackend` (scale to zero
 * wakes an instance there); when that says one runs now, this request is
 * forwarded to it from here (later ones go through HAProxy, which got the
 * server in the meantime); otherwise a 503 with Retry-After.
 */
export class Activator {
  private readonly server: http.Server;
  port = 0;

  constructor(private readonly o: ActivatorOptions) {
    this.server = http.createServer({ keepAliveTimeout: 5000 }, (req, res) => void this.onRequest(req, res));
    this.server.on('upgrade', (req: IncomingMessage, s: net.Socket) => {
      const status = 503;
      s.end(
        `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nRetry-After: ${RETRY_AFTER_S}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
      );
    });
  }

  async listen(): Promise<number> {
    this.port = await listenLoopback(this.server);
    return this.port;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const port = Number(req.headers[PORT_HEADER]);
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
      const inB = sock.bytesRead - (sock._uhIn ?? 0);
      const outB = sock.bytesWritten - (sock._uhOut ?? 0);
      sock._uhIn = sock.bytesRead;
      sock._uhOut = sock.bytesWritten;
      this.o.onAnswered?.(route.groupId, inB, outB);
    });
    const woke = this.o.onNoBackend ? await this.o.onNoBackend(route.groupId).catch(() => false) : false;
    const b = woke ? this.o.backends(route.groupId).find((x) => x.state === 'running') : undefined;
    if (!b)
      return sendText(res, 503, 'unihost: this service is unavailable: no instance of it is running.', {
        'retry-after': String(RETRY_AFTER_S),
      });
    this.forward(req, res, b, route.destinationPort);
  }

  /** Sends a woken group's first request to the instance that now runs. */
  private forward(req: IncomingMessage, res: ServerResponse, b: Backend, port: number): void {
    const headers = { ...req.headers };
    delete headers[PORT_HEADER];
    const up = http.request({ host: b.host, port, method: req.method, path: req.url, headers }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      ur.pipe(res);
    });
    up.on('error', (e) => {
      this.o.log.warn(
        { instance: b.instanceId, err: e.message },
        'gateway: activator could not reach the woken instance',
      );
      sendText(res, 502, 'unihost: the service did not answer.');
    });
    req.pipe(up);
  }
}
