import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fastifyStatic from '@fastify/static';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** Where `npm run build:web` writes the console (web/dist), from src/api or dist/api alike. */
export const CONSOLE_DIR = fileURLToPath(new URL('../../web/dist/', import.meta.url));

/**
 * The console's pages may load only what the daemon serves: no inline script, no other origin, no
 * framing. Names, logs and messages are shown as text by the framework; this is the second wall.
 */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const PAGE_HEADERS = {
  'content-security-policy': CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

/** Does a request for `/` want the console page (a browser) rather than the API's JSON greeting? */
export const wantsPage = (req: FastifyRequest): boolean =>
  req.url.split('?')[0] === '/' && /\btext\/html\b/.test(String(req.headers.accept ?? ''));

/** Paths of the console's files, served without a token (they hold no data; the API calls carry it). */
export const isConsolePath = (req: FastifyRequest): boolean =>
  req.method === 'GET' || req.method === 'HEAD'
    ? req.url.startsWith('/assets/') || req.url === '/favicon.svg' || wantsPage(req)
    : false;

/**
 * Serves the web console (docs/console.md): `/` to a browser, its hashed
 * assets under `/assets/` with a year's cache, the page itself revalidated
 * every time so a new build is picked up at once. Without a build, `/`
 * answers as before and says how to build it.
 */
export function serveConsole(app: FastifyInstance, dir = CONSOLE_DIR): boolean {
  if (!existsSync(`${dir}index.html`)) return false;
  void app.register(fastifyStatic, {
    root: dir,
    prefix: '/assets-root/', // files are routed explicitly below; this prefix is never linked
    serve: false,
    index: false,
    etag: true,
    lastModified: true,
  });
  void app.register(
    async (scope) => {
      await scope.register(fastifyStatic, {
        root: `${dir}assets`,
        prefix: '/',
        decorateReply: false,
        index: false,
        etag: true,
        // names carry a hash of the content (Vite): a year's cache, never revalidated
        maxAge: '365d',
        immutable: true,
        setHeaders: (reply) => void reply.header('x-content-type-options', 'nosniff'),
      });
    },
    { prefix: '/assets' },
  );
  app.get('/favicon.svg', (_req, reply) =>
    reply.header('cache-control', 'public, max-age=86400').sendFile('favicon.svg'),
  );
  return true;
}

/** The console page itself (`GET /` from a browser). */
export function sendPage(reply: FastifyReply): FastifyReply {
  return reply
    .headers({ ...PAGE_HEADERS, 'cache-control': 'no-cache' })
    .type('text/html; charset=utf-8')
    .sendFile('index.html', { cacheControl: false });
}
