import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type net from 'node:net';
import type { Dispatcher } from 'undici';
import type { Ctx } from './context.js';
import { dialBackend, splice } from './tcp-proxy.js';
import type { Backend, Route } from './types.js';

/** Headers that describe one hop and are not forwarded (RFC 9110 7.6.1), plus ours that clients must not forge. */
const REQUEST_DROP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'expect',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
]);
const RESPONSE_DROP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'trailer',
  'upgrade',
]);

/** Methods whose request may be sent again to another backend (RFC 9110 9.2.2). */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']);

export function clientIp(s: net.Socket): string {
  const a = s.remoteAddress ?? '';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

/** Header names listed in a Connection header are hop-by-hop too. */
function connectionTokens(v: string | string[] | undefined): Set<string> | undefined {
  if (!v) return undefined;
  const s = Array.isArray(v) ? v.join(',') : v;
  return new Set(s.split(',').map((t) => t.trim().toLowerCase()));
}

/** The request's host: `Host`, or HTTP/2's `:authority`. */
export function requestHost(req: IncomingMessage): string | undefined {
  return req.headers.host ?? (req.headers[':authority'] as string | undefined);
}

/** The request's end-to-end headers as a flat [name, value, ...] list, with X-Forwarded-* set by us. */
export function forwardHeaders(req: IncomingMessage, keep: ReadonlySet<string> = new Set()): string[] {
  const raw = req.rawHeaders;
  const extra = connectionTokens(req.headers.connection);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]!.toLowerCase();
    if (k.startsWith(':')) continue; // HTTP/2 pseudo-headers: the backend speaks HTTP/1.1
    if ((REQUEST_DROP.has(k) || extra?.has(k)) && !keep.has(k)) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  const host = requestHost(req);
  if (req.headers.host === undefined && host !== undefined) out.push('host', host);
  const encrypted = (req.socket as { encrypted?: boolean }).encrypted === true;
  out.push('x-forwarded-for', clientIp(req.socket), 'x-forwarded-proto', encrypted ? 'https' : 'http');
  if (host !== undefined) out.push('x-forwarded-host', host);
  return out;
}

function responseHeaders(h: IncomingHttpHeaders): OutgoingHttpHeaders {
  const extra = connectionTokens(h.connection);
  const out: OutgoingHttpHeaders = {};
  for (const k in h) {
    if (RESPONSE_DROP.has(k) || extra?.has(k)) continue;
    const v = h[k];
    if (v !== undefined) out[k] = v;
  }
  return out;
}

/** A short plain-text answer from the gateway itself. */
export function sendText(res: ServerResponse, status: number, text: string, headers: OutgoingHttpHeaders = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = `${text}\n`;
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    ...headers,
  });
  res.end(body);
}

function hasBody(req: IncomingMessage): boolean {
  // HTTP/2 has no Transfer-Encoding: a body follows unless the headers ended the stream.
  const stream = (req as { stream?: { endAfterHeaders?: boolean } }).stream;
  if (req.httpVersionMajor === 2 && stream) return stream.endAfterHeaders === false;
  const len = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (len !== undefined && len !== '0');
}

/** Counts the bytes the client connection moved since the last request into the group and instance. */
function accountBytes(ctx: Ctx, groupId: string, instanceId: string | undefined, s: net.Socket): void {
  const mark = s as net.Socket & { _uhIn?: number; _uhOut?: number };
  const inB = s.bytesRead - (mark._uhIn ?? 0);
  const outB = s.bytesWritten - (mark._uhOut ?? 0);
  mark._uhIn = s.bytesRead;
  mark._uhOut = s.bytesWritten;
  ctx.stats.bytes(groupId, instanceId, inB, outB);
}

/** seconds a client is asked to wait after a 503 (no running instance) */
export const RETRY_AFTER_S = 5;

/**
 * Forwards one request to the next running backend over its keep-alive
 * pool. A failure before the response started is retried on another backend
 * when the method is idempotent and the body was not read yet; otherwise the
 * client gets 502 (503 when no instance runs at all).
 */
export function proxyHttp(ctx: Ctx, route: Route, req: IncomingMessage, res: ServerResponse): void {
  const exclude = new Set<string>();
  let lastInstance: string | undefined;
  const sock = req.socket; // detached from req once the response is done
  res.once('close', () => accountBytes(ctx, route.groupId, lastInstance, sock));
  const attempt = (b: Backend | undefined): void => {
    if (res.destroyed) return;
    if (!b) {
      const why = exclude.size > 0 ? 'its instances did not answer' : 'no instance of it is running';
      // Retry-After: a 503 means nothing runs (or a wake could not finish); the next try may find it up
      sendText(
        res,
        exclude.size > 0 ? 502 : 503,
        `unihost: this service is unavailable: ${why}.`,
        exclude.size > 0 ? {} : { 'retry-after': String(RETRY_AFTER_S) },
      );
      return;
    }
    lastInstance = b.instanceId;
    exchange(ctx, route, req, res, b, (err) => {
      exclude.add(b.instanceId);
      const retry = IDEMPOTENT.has(req.method ?? '') && !req.readableDidRead;
      ctx.log.warn(
        { group: route.groupId, instance: b.instanceId, method: req.method, err: err.message, retry },
        'gateway: backend request failed before the response',
      );
      if (retry) next();
      else sendText(res, 502, 'unihost: the service did not answer.');
    });
  };
  const next = (): void => {
    const b = ctx.balancer.pick(route.groupId, exclude);
    if (b || exclude.size > 0) attempt(b);
    else void ctx.balancer.pickOrWake(route.groupId).then(attempt, () => attempt(undefined));
  };
  next();
}

/** One request/response exchange with one backend; `failed` runs if it breaks before the response started. */
function exchange(
  ctx: Ctx,
  route: Route,
  req: IncomingMessage,
  res: ServerResponse,
  b: Backend,
  failed: (err: Error) => void,
): void {
  let controller: Dispatcher.DispatchController | undefined;
  let started = false;
  let clientGone = false;
  const release = ctx.stats.acquire(route.groupId, b.instanceId, () => {
    controller?.abort(new Error('instance disconnected'));
    res.destroy();
  });
  const onClose = (): void => {
    if (res.writableFinished) return;
    clientGone = true;
    controller?.abort(new Error('client closed the connection'));
  };
  res.once('close', onClose);
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart(c) {
      controller = c;
      if (clientGone) c.abort(new Error('client closed the connection'));
    },
    onResponseStart(c, status, headers, message) {
      if (status < 200) return; // 1xx other than 101: the client got its own 100 Continue from node:http
      started = true;
      if (req.httpVersionMajor === 2) res.writeHead(status, responseHeaders(headers));
      else res.writeHead(status, message, responseHeaders(headers));
    },
    onResponseData(c, chunk) {
      if (!res.write(chunk)) {
        c.pause();
        res.once('drain', () => c.resume());
      }
    },
    onResponseEnd() {
      res.removeListener('close', onClose);
      res.end();
      release();
    },
    onResponseError(_c, err) {
      res.removeListener('close', onClose);
      release();
      if (clientGone || res.destroyed) return;
      if (!started) failed(err);
      else {
        ctx.log.warn(
          { group: route.groupId, instance: b.instanceId, err: err.message },
          'gateway: backend broke the response',
        );
        res.destroy(err);
      }
    },
  };
  const pool = ctx.upstreams.get(b.instanceId, b.host, route.destinationPort);
  pool.dispatch(
    {
      path: req.url ?? '/',
      method: req.method as Dispatcher.HttpMethod,
      headers: forwardHeaders(req),
      body: hasBody(req) ? req : null,
    },
    handler,
  );
}

/** Answers on port 80 with `redirect`: to https on 443, same host, path and query. */
export function redirectHttps(req: IncomingMessage, res: ServerResponse, host: string): void {
  const location = `https://${host}${req.url ?? '/'}`;
  // 301 for GET/HEAD as browsers expect; 308 keeps the method and body of others.
  const status = req.method === 'GET' || req.method === 'HEAD' ? 301 : 308;
  sendText(res, status, `Moved to ${location}`, { location });
}

/**
 * WebSocket and other `Upgrade` requests: the request head is written to a
 * fresh backend connection and the two sockets are piped; the backend's 101
 * (or refusal) goes to the client as is.
 */
export async function tunnelUpgrade(
  ctx: Ctx,
  route: Route,
  req: IncomingMessage,
  client: net.Socket,
  head: Buffer,
): Promise<void> {
  let gone = false;
  client.once('close', () => (gone = true));
  client.on('error', () => {});
  const r = await dialBackend(ctx, route, () => gone);
  if (!('backend' in r)) {
    const status = r.tried > 0 ? '502 Bad Gateway' : `503 Service Unavailable\r\nRetry-After: ${RETRY_AFTER_S}`;
    if (!gone) client.end(`HTTP/1.1 ${status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
    return;
  }
  const { backend, socket } = r;
  if (gone) {
    socket.destroy();
    return;
  }
  const h = forwardHeaders(req, new Set(['connection', 'upgrade']));
  let text = `${req.method} ${req.url} HTTP/1.1\r\n`;
  for (let i = 0; i < h.length; i += 2) text += `${h[i]}: ${h[i + 1]}\r\n`;
  socket.write(`${text}\r\n`);
  if (head.length > 0) socket.write(head);
  const release = ctx.stats.acquire(route.groupId, backend.instanceId, () => {
    socket.destroy();
    client.destroy();
  });
  splice(ctx, route.groupId, backend.instanceId, client, socket, ctx.limits.idleTimeoutMs, release);
}
