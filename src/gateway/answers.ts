import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** Seconds a client is told to wait after a 503 (nothing runs, or a wake could not finish). */
export const RETRY_AFTER_S = 5;

/** A short plain-text answer; a response already under way is cut instead. */
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

/** The `redirect` handler: to the same URL over HTTPS. */
export function redirectHttps(req: IncomingMessage, res: ServerResponse, host: string): void {
  const location = `https://${host}${req.url ?? '/'}`;
  // 301 for GET/HEAD as browsers expect; 308 keeps the method and body of others.
  const status = req.method === 'GET' || req.method === 'HEAD' ? 301 : 308;
  sendText(res, status, `Moved to ${location}`, { location });
}

/** Lower case, no trailing dot, no port: the form route FQDNs are kept in. Undefined when not a plausible host name. */
export function normalizeHost(h: string | undefined): string | undefined {
  if (!h) return undefined;
  let s = h.toLowerCase();
  const colon = s.lastIndexOf(':');
  if (colon !== -1 && !s.includes(']')) s = s.slice(0, colon);
  if (s.endsWith('.')) s = s.slice(0, -1);
  return s.length > 0 && s.length <= 253 && /^[a-z0-9.-]+$/.test(s) ? s : undefined;
}
