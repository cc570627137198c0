import http, { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import {
  ALERT_DECODE_ERROR,
  ALERT_HANDSHAKE_FAILURE,
  ALERT_UNRECOGNIZED_NAME,
  normalizeHost,
  parseClientHello,
  tlsAlert,
} from './client-hello.js';
import type { Ctx } from './context.js';
import { clientIp, proxyHttp, redirectHttps, requestHost, sendText, tunnelUpgrade } from './http-proxy.js';
import { LogLimiter } from './log-limit.js';
import { proxyTcp } from './tcp-proxy.js';
import { TLS_BASE, type TlsContexts } from './tls-contexts.js';
import type { Route } from './types.js';

/** The ClientHello may not take more than this (64 KiB message plus record headers). */
const MAX_HELLO_BYTES = 70 * 1024;
const ACME_PREFIX = '/.well-known/acme-challenge/';
/** the ALPN protocol of TLS-ALPN-01 validators (RFC 8737 6.2) */
const ACME_TLS_ALPN = 'acme-tls/1';

type Tagged = net.Socket & { _uhSni?: string; _uhGroup?: string };
type Resolved = { route: Route; host: string } | { status: number; text: string };

/**
 * Everything behind one public port: the listening socket with its caps, the
 * ClientHello check, the TLS terminators and the HTTP parser. Routes come
 * from the Gateway and may change while connections are open: each new
 * connection and each request looks its route up again.
 */
export class Listener {
  private routes = new Map<string, Route>();
  private tlsMode = false;
  private readonly server: net.Server;
  private readonly http: http.Server;
  private readonly h2: http2.Http2Server;
  private readonly tlsHttp: tls.Server;
  private readonly tlsTcp: tls.Server;
  /** answers TLS-ALPN-01 validations: the challenge certificate, `acme-tls/1`, then close */
  private readonly tlsAcme: tls.Server;
  private readonly sockets = new Set<net.Socket>();
  private readonly perIp = new Map<string, number>();
  private readonly noisy: LogLimiter;
  boundPort: number | undefined;

  constructor(
    readonly port: number,
    private readonly ctx: Ctx,
    private readonly contexts: TlsContexts,
  ) {
    const l = ctx.limits;
    this.noisy = new LogLimiter(ctx.log);
    this.server = net.createServer({ noDelay: true }, (s) => this.onConnection(s));
    this.server.maxConnections = l.maxConnections;
    this.server.on('drop', (d) =>
      this.noisy.warn('cap', { port, client: d?.remoteAddress }, 'gateway: connection cap reached, connection dropped'),
    );
    this.http = http.createServer({
      maxHeaderSize: l.maxHeaderSize,
      headersTimeout: l.headersTimeoutMs,
      requestTimeout: 0, // long uploads are fine; slow heads are cut by headersTimeout
      keepAliveTimeout: l.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, l.headersTimeoutMs),
    });
    this.http.timeout = l.idleTimeoutMs;
    this.http.on('request', (req, res) => this.onRequest(req, res));
    this.http.on('upgrade', (req: IncomingMessage, s: net.Socket, head: Buffer) => this.onUpgrade(req, s, head));
    this.http.on('clientError', (e: NodeJS.ErrnoException, s: net.Socket) => this.onClientError(e, s));
    // node:http only runs its header-timeout checks once 'listening' fired; this server never
    // listens itself (connections are handed to it), so start the checks by hand.
    this.http.emit('listening');
    // No default certificate: every handshake gets its context from SNICallback (a ClientHello
    // without SNI is refused before TLS). With an ECDSA default, OpenSSL kept serving it even
    // when SNICallback chose an RSA context (an RSA upload got the wildcard).
    const tlsOpts: tls.TlsOptions = {
      ...TLS_BASE,
      handshakeTimeout: l.handshakeTimeoutMs,
      SNICallback: (name, cb) => cb(null, contexts.forName(normalizeHost(name) ?? '')),
    };
    // HTTP/2 to clients where they offer it (requests are proxied to the backend as HTTP/1.1).
    this.h2 = http2.createServer({ maxSessionMemory: 16, settings: { maxConcurrentStreams: 128 } });
    this.h2.setTimeout(l.idleTimeoutMs);
    this.h2.on('request', (req, res) =>
      this.onRequest(req as unknown as IncomingMessage, res as unknown as ServerResponse),
    );
    this.h2.on('sessionError', (e) => this.noisy.info('h2', { port, err: e.message }, 'gateway: HTTP/2 session error'));
    this.tlsHttp = tls.createServer({
      ...tlsOpts,
      ALPNCallback: ({ protocols }) =>
        protocols.includes('h2') ? 'h2' : protocols.includes('http/1.1') ? 'http/1.1' : undefined,
    });
    this.tlsTcp = tls.createServer({ ...tlsOpts, allowHalfOpen: true });
    this.tlsAcme = tls.createServer({
      ...tlsOpts,
      SNICallback: (name, cb) => cb(null, contexts.alpnChallenge(normalizeHost(name) ?? '')),
      ALPNProtocols: [ACME_TLS_ALPN],
    });
    this.tlsAcme.on('secureConnection', (s) => s.end());
    this.tlsAcme.on('tlsClientError', (_e, s) => s.destroy());
    for (const t of [this.tlsHttp, this.tlsTcp]) {
      t.on('secureConnection', (s) => this.onSecure(s, t === this.tlsHttp));
      t.on('tlsClientError', (e, s) => {
        this.noisy.info('tls', { port, client: clientIp(s), err: e.message }, 'gateway: TLS handshake failed');
        s.destroy();
      });
    }
  }

  setRoutes(routes: Route[]): void {
    const m = new Map<string, Route>();
    for (const r of routes) for (const f of r.fqdns) m.set(f, r);
    this.routes = m;
    const tlsCount = routes.filter((r) => r.handlers.includes('tls')).length;
    this.tlsMode = tlsCount > 0;
    if (tlsCount > 0 && tlsCount < routes.length) {
      this.ctx.log.error(
        { port: this.port },
        'gateway: routes on one port disagree on tls; plain ones are unreachable',
      );
    }
  }

  async listen(host: string, port: number): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen({ host, port }, () => {
        this.server.removeListener('error', reject);
        resolve();
      });
    });
    this.server.on('error', (e) => this.ctx.log.error({ port: this.port, err: e.message }, 'gateway: listener error'));
    this.boundPort = (this.server.address() as net.AddressInfo).port;
    return this.boundPort;
  }

  /** Stops accepting and cuts this port's connections. */
  async close(): Promise<void> {
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    for (const s of this.sockets) s.destroy();
    this.http.close();
    await closed;
  }

  get openConnections(): number {
    return this.sockets.size;
  }

  private onConnection(raw: net.Socket): void {
    const ip = clientIp(raw);
    raw.on('error', () => {}); // reported through the protocol layer or 'close'
    const n = this.perIp.get(ip) ?? 0;
    if (n >= this.ctx.limits.maxConnectionsPerIp) {
      this.noisy.warn(
        'ipcap',
        { port: this.port, client: ip },
        'gateway: per-client connection cap reached, connection refused',
      );
      raw.destroy();
      return;
    }
    this.perIp.set(ip, n + 1);
    this.sockets.add(raw);
    raw.once('close', () => {
      this.sockets.delete(raw);
      const left = (this.perIp.get(ip) ?? 1) - 1;
      if (left <= 0) this.perIp.delete(ip);
      else this.perIp.set(ip, left);
    });
    if (this.tlsMode) this.readHello(raw);
    else this.http.emit('connection', raw);
  }

  /** Reads the ClientHello to learn the name before any TLS work, refusing unknown names with an alert. */
  private readHello(raw: net.Socket): void {
    let buf: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => {
      this.noisy.info('hello-timeout', { port: this.port, client: clientIp(raw) }, 'gateway: no ClientHello in time');
      raw.destroy();
    }, this.ctx.limits.handshakeTimeoutMs);
    raw.once('close', () => clearTimeout(timer));
    const onData = (d: Buffer): void => {
      buf = buf.length === 0 ? d : Buffer.concat([buf, d]);
      const r = parseClientHello(buf);
      if (r.kind === 'more' && buf.length <= MAX_HELLO_BYTES) return;
      raw.removeListener('data', onData);
      raw.pause();
      clearTimeout(timer);
      const client = clientIp(raw);
      if (r.kind === 'http') {
        const body = 'This port speaks TLS: use https://\n';
        raw.end(
          `HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
        );
      } else if (r.kind !== 'hello') {
        const why = r.kind === 'garbage' ? r.why : 'ClientHello too large';
        this.noisy.info('garbage', { port: this.port, client, why }, 'gateway: not TLS, connection closed');
        raw.end(tlsAlert(ALERT_DECODE_ERROR));
      } else if (r.sni !== undefined && r.alpn.includes(ACME_TLS_ALPN) && this.contexts.alpnChallenge(r.sni)) {
        // An ACME validator (it offers acme-tls/1 only): the challenge certificate, whatever the route.
        raw.unshift(buf);
        this.tlsAcme.emit('connection', raw);
      } else {
        const route = r.sni === undefined ? undefined : this.routes.get(r.sni);
        if (!route || !route.handlers.includes('tls')) {
          this.noisy.info(
            'unknown-sni',
            { port: this.port, client, sni: r.sni ?? null },
            'gateway: unknown server name refused',
          );
          raw.end(tlsAlert(ALERT_UNRECOGNIZED_NAME));
          return;
        }
        if (!this.contexts.has(r.sni!)) {
          // A custom domain whose certificate is pending: unavailable (api-v1.md, certificate states).
          this.noisy.info(
            'pending-cert',
            { port: this.port, client, sni: r.sni },
            'gateway: no certificate for this name yet (pending), handshake refused',
          );
          raw.end(tlsAlert(ALERT_HANDSHAKE_FAILURE));
          return;
        }
        raw.unshift(buf);
        (route.handlers.includes('http') ? this.tlsHttp : this.tlsTcp).emit('connection', raw);
      }
    };
    raw.on('data', onData);
  }

  private onSecure(s: tls.TLSSocket, isHttp: boolean): void {
    const name = normalizeHost(typeof s.servername === 'string' ? s.servername : undefined);
    const route = name === undefined ? undefined : this.routes.get(name);
    if (!route) {
      s.destroy(); // the route went away during the handshake
      return;
    }
    (s as Tagged)._uhSni = name;
    (s as Tagged)._uhGroup = route.groupId;
    s.once('close', this.ctx.stats.clientConnection(route.groupId));
    if (isHttp) (s.alpnProtocol === 'h2' ? this.h2 : this.http).emit('connection', s);
    else void proxyTcp(this.ctx, route, s);
  }

  /** Finds the route of a request: the SNI's on TLS (Host must agree), the Host's on plain HTTP. */
  private resolve(req: IncomingMessage): Resolved {
    const s = req.socket as Tagged;
    const host = normalizeHost(requestHost(req));
    const name = s._uhSni ?? host;
    if (s._uhSni !== undefined && host !== undefined && host !== s._uhSni) {
      return { status: 421, text: `unihost: this connection is for ${s._uhSni}, not ${host}.` };
    }
    const route = name === undefined ? undefined : this.routes.get(name);
    if (!route || name === undefined) {
      return {
        status: 404,
        text: `unihost: no service is published at ${name ?? 'this address'} on port ${this.port}.`,
      };
    }
    if (!route.handlers.includes('http')) return { status: 404, text: `unihost: ${name} does not serve HTTP here.` };
    if (s._uhGroup === undefined) {
      // Plain HTTP learns the group at the first request; the connection counts for that group.
      s._uhGroup = route.groupId;
      s.once('close', this.ctx.stats.clientConnection(route.groupId));
    }
    return { route, host: name };
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    // ACME HTTP-01 first: the authority asks for the name before it has any route or while it redirects.
    const path = req.url ?? '/';
    const host = normalizeHost(requestHost(req));
    if (this.ctx.acmeChallenge && !this.tlsMode && host !== undefined && path.startsWith(ACME_PREFIX)) {
      const answer = this.ctx.acmeChallenge(host, path.slice(ACME_PREFIX.length));
      if (answer !== undefined) {
        sendText(res, 200, answer);
        return;
      }
    }
    const r = this.resolve(req);
    if ('status' in r) {
      sendText(res, r.status, r.text);
      return;
    }
    if (r.route.handlers.includes('redirect')) redirectHttps(req, res, r.host);
    else proxyHttp(this.ctx, r.route, req, res);
  }

  private onUpgrade(req: IncomingMessage, s: net.Socket, head: Buffer): void {
    const r = this.resolve(req);
    if ('status' in r || r.route.handlers.includes('redirect')) {
      const status = 'status' in r ? r.status : 404;
      s.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
      return;
    }
    void tunnelUpgrade(this.ctx, r.route, req, s, head);
  }

  /** Malformed or oversized heads and slow clients: answer like node:http would, and log (rate-limited). */
  private onClientError(e: NodeJS.ErrnoException, s: net.Socket): void {
    const code = e.code ?? '';
    const status = code === 'HPE_HEADER_OVERFLOW' ? 431 : code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    if (code !== 'ECONNRESET') {
      this.noisy.info(
        `http-${code}`,
        { port: this.port, client: clientIp(s), code, status },
        'gateway: bad HTTP request',
      );
    }
    const inFlight = (s as net.Socket & { _httpMessage?: ServerResponse })._httpMessage;
    if (code === 'ECONNRESET' || !s.writable || (inFlight && inFlight.headersSent)) {
      s.destroy();
      return;
    }
    const body = `${STATUS_CODES[status]}\n`;
    s.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
}
