import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { OutgoingHttpHeaders } from 'node:http';
import { open } from 'node:fs/promises';
import { isRegistryError, parseScopes, RegistryError } from '../domain/registry.js';
import { isUnihostError } from '../errors.js';
import type { Services } from '../services/index.js';
import { MANIFEST_MAX, type Caller, type Page } from '../services/registry.js';
import { RegistryTokens } from '../services/registry-tokens.js';
import { sendFileSpan } from './send-file.js';
import { RequestWindows, type AuthFailureLimit, type RateLimitOptions } from './rate-limit.js';

/** Largest form `POST /v2/token` reads. */
const OAUTH_FORM_MAX = 8192;
/** Lifetime of the scoped tokens of `GET /v2/token`. */
const TOKEN_TTL_S = 300;
/** Uploads not written to for this long are removed. */
const UPLOAD_MAX_AGE_MS = 24 * 3600_000;
/** Blobs (or ranges) up to this size are read into one buffer and sent in one write. */
const SMALL_BLOB = 256 * 1024;

/** `length` bytes of a file from `start` (a blob: it does not change under the read). */
async function readSpan(path: string, start: number, length: number): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.allocUnsafe(length);
    let got = 0;
    while (got < length) {
      const { bytesRead } = await fh.read(buf, got, length - got, start + got);
      if (bytesRead === 0) throw new Error(`blob ${path} ended after ${got} of ${length} bytes`);
      got += bytesRead;
    }
    return buf;
  } finally {
    await fh.close();
  }
}
const API_VERSION = { 'docker-distribution-api-version': 'registry/2.0' };

/** `/v2/...` paths of the distribution spec; the repository name may hold a `/`. */
const ROUTES: [RegExp, string][] = [
  [/^\/v2\/?$/, 'base'],
  [/^\/v2\/token$/, 'token'],
  [/^\/v2\/_catalog$/, 'catalog'],
  [/^\/v2\/(.+)\/blobs\/uploads\/?$/, 'uploads'],
  [/^\/v2\/(.+)\/blobs\/uploads\/([^/]+)$/, 'upload'],
  [/^\/v2\/(.+)\/blobs\/([^/]+)$/, 'blob'],
  [/^\/v2\/(.+)\/manifests\/([^/]+)$/, 'manifest'],
  [/^\/v2\/(.+)\/tags\/list$/, 'tags'],
  [/^\/v2\/(.+)\/referrers\/([^/]+)$/, 'referrers'],
];

/** Does this URL belong to the registry (so the v1 API's authentication does not apply)? */
export const isRegistryPath = (url: string): boolean => /^\/v2(?:[/?]|$)/.test(url);

function base(req: FastifyRequest): string {
  const proto = String(req.headers['x-forwarded-proto'] ?? req.protocol)
    .split(',')[0]!
    .trim();
  return `${proto === 'https' ? 'https' : 'http'}://${req.headers.host ?? 'localhost'}`;
}

function challenge(req: FastifyRequest, scope?: string): string {
  const host = String(req.headers.host ?? 'unihost').replace(/"/g, '');
  return `Bearer realm="${base(req)}/v2/token",service="${host}"${scope ? `,scope="${scope}"` : ''}`;
}

/** A registry error in the distribution spec's form (with the challenge or range headers it calls for). */
export function sendRegistryError(req: FastifyRequest, reply: FastifyReply, e: RegistryError): FastifyReply {
  void reply.code(e.http).headers(API_VERSION);
  // a body left unread (refused before or while it streamed): the connection cannot carry another request
  if (!req.raw.readableEnded && !req.raw.complete) void reply.header('connection', 'close');
  const detail = e.detail as { scope?: string; size?: number; retry_after_s?: number } | undefined;
  if (e.code === 'UNAUTHORIZED') void reply.header('www-authenticate', challenge(req, detail?.scope));
  if (e.code === 'TOOMANYREQUESTS' && detail?.retry_after_s)
    void reply.header('retry-after', String(detail.retry_after_s));
  if (e.code === 'RANGE_INVALID' && detail?.size !== undefined) {
    void reply.header('range', `0-${Math.max(0, detail.size - 1)}`);
  }
  const body = {
    errors: [
      { code: e.code === 'RANGE_INVALID' ? 'BLOB_UPLOAD_INVALID' : e.code, message: e.message, detail: e.detail ?? {} },
    ],
  };
  return req.method === 'HEAD' ? reply.send() : reply.type('application/json').send(body);
}

/** Credentials of a request: HTTP Basic (user name and API token), a scoped registry token, or an API token. */
async function authenticate(
  services: Services,
  tokens: RegistryTokens,
  header: string | undefined,
): Promise<Caller | undefined> {
  if (!header) return undefined;
  const basic = /^Basic\s+([A-Za-z0-9+/=]{1,2048})\s*$/i.exec(header);
  if (basic) {
    const text = Buffer.from(basic[1]!, 'base64').toString('utf8');
    const colon = text.indexOf(':');
    if (colon < 0) return undefined;
    const user = await services.users.authenticate(`Bearer ${text.slice(colon + 1)}`);
    return user && user.name === text.slice(0, colon).toLowerCase() ? { user } : undefined;
  }
  const bearer = /^Bearer\s+(\S{1,8192})\s*$/i.exec(header);
  if (!bearer) return undefined;
  if (RegistryTokens.looksLike(bearer[1]!)) {
    const c = tokens.verify(bearer[1]!);
    const user = c ? await services.store.read((tx) => tx.users.get(c.sub)) : undefined;
    return user && c ? { user, scopes: c.access } : undefined;
  }
  const user = await services.users.authenticate(header);
  return user ? { user } : undefined;
}

/** Credentials that cannot be a guess: a valid scoped token, or an API token the daemon has verified lately. */
function knownGood(services: Services, tokens: RegistryTokens, header: string | undefined): boolean {
  if (!header) return false;
  const basic = /^Basic\s+([A-Za-z0-9+/=]{1,2048})\s*$/i.exec(header);
  if (basic) {
    const text = Buffer.from(basic[1]!, 'base64').toString('utf8');
    return services.users.cachedUser(`Bearer ${text.slice(text.indexOf(':') + 1)}`) !== undefined;
  }
  const bearer = /^Bearer\s+(\S{1,8192})\s*$/i.exec(header)?.[1];
  if (bearer && RegistryTokens.looksLike(bearer)) return tokens.verify(bearer) !== undefined;
  return services.users.cachedUser(header) !== undefined;
}

/** Reads a request body of at most `max` bytes. */
async function readBody(req: FastifyRequest, max: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const chunk of req.raw as AsyncIterable<Buffer>) {
    n += chunk.length;
    if (n > max) throw new RegistryError('SIZE_INVALID', `manifest is larger than ${max} bytes`, undefined, 413);
    parts.push(chunk);
  }
  return Buffer.concat(parts);
}

function pageParams(req: FastifyRequest): { n?: number; last?: string } {
  const q = req.query as Record<string, string | undefined>;
  const out: { n?: number; last?: string } = {};
  if (q.n !== undefined) {
    if (!/^\d{1,9}$/.test(q.n))
      throw new RegistryError('SIZE_INVALID', `parameter 'n': '${q.n.slice(0, 20)}' is not a count`, undefined, 400);
    out.n = Number(q.n);
  }
  if (q.last !== undefined) out.last = q.last;
  return out;
}

function linkNext(reply: FastifyReply, path: string, p: Page, n: number | undefined): void {
  if (p.next === undefined) return;
  const qs = new URLSearchParams({ ...(n !== undefined ? { n: String(n) } : {}), last: p.next });
  void reply.header('link', `<${path}?${qs.toString()}>; rel="next"`);
}

/** `Content-Range: <start>-<end>` of a chunk (the spec's form; `bytes ` prefix tolerated). */
function contentRange(v: string | undefined): { start: number; end: number } | undefined {
  if (v === undefined) return undefined;
  const m = /^(?:bytes )?(\d{1,15})-(\d{1,15})$/.exec(v.trim());
  if (!m || Number(m[2]) < Number(m[1]))
    throw new RegistryError('RANGE_INVALID', `Content-Range '${v.slice(0, 60)}' is not '<start>-<end>'`);
  return { start: Number(m[1]), end: Number(m[2]) };
}

/** A blob's `Range: bytes=a-b` (one range; `a-` and `-n` too), or undefined for the whole blob. */
function byteRange(v: string | undefined, size: number): { start: number; end: number } | undefined {
  if (v === undefined) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(v.trim());
  let r: { start: number; end: number } | undefined;
  if (m && (m[1] !== '' || m[2] !== '')) {
    if (m[1] === '') r = { start: Math.max(0, size - Number(m[2])), end: size - 1 };
    else r = { start: Number(m[1]), end: m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1) };
  }
  if (!r || r.start > r.end || r.start >= size) {
    throw new RegistryError('RANGE_INVALID', `Range '${v.slice(0, 60)}' is not satisfiable (blob of ${size} bytes)`, {
      size,
    });
  }
  return r;
}

const uploadRange = (size: number): string => `0-${Math.max(0, size - 1)}`;

/**
 * The OCI distribution API (spec 1.1) at `/v2/` on the API's listener
 * (docs/registry.md). Its own authentication (HTTP Basic, the token flow),
 * its own error form; the request body of blob uploads is streamed to disk.
 */
export function registerRegistry(
  app: FastifyInstance,
  services: Services,
  failures?: AuthFailureLimit,
  rateLimit?: RateLimitOptions,
): void {
  const reg = services.registry;
  const tokens = reg.tokens;
  // per user, the API's budget again but a budget of its own: a push does not starve API calls
  const windows = rateLimit && rateLimit.max > 0 ? new RequestWindows(rateLimit) : undefined;

  // Abandoned uploads: at start, then hourly.
  let sweeper: NodeJS.Timeout | undefined;
  /** the sweep under way: a close waits for it (it writes in the data dir, which may go right after) */
  let sweeping: Promise<unknown> = Promise.resolve();
  const sweep = (): void => {
    sweeping = reg
      .reclaimUploads(UPLOAD_MAX_AGE_MS)
      .catch((e: unknown) => app.log.warn({ err: e }, 'upload sweep failed'));
  };
  app.addHook('onReady', (done) => {
    sweep();
    sweeper = setInterval(sweep, 3600_000).unref();
    done();
  });
  app.addHook('onClose', async () => {
    clearInterval(sweeper);
    await sweeping;
  });

  void app.register(async (scope) => {
    // Bodies are streamed by the handlers, never parsed or buffered by Fastify.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null));

    const handler = async (req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
      void reply.headers(API_VERSION);
      try {
        return await route(req, reply);
      } catch (e) {
        if (isRegistryError(e)) return sendRegistryError(req, reply, e);
        if (isUnihostError(e) && e.http < 500)
          return sendRegistryError(req, reply, new RegistryError('DENIED', e.message, undefined, e.http));
        const ce = e as NodeJS.ErrnoException;
        if (ce.code === 'ECONNRESET' || ce.message === 'aborted') return reply; // the client left mid-body
        req.log.error({ err: e }, 'registry request failed');
        void reply.code(500);
        return reply.send({ errors: [{ code: 'UNKNOWN', message: 'internal error', detail: {} }] });
      }
    };

    const caller = (req: FastifyRequest): Promise<Caller> => callerOf(req.ip, req.headers.authorization);

    /** Who sends `authorization` from address `ip`, or the registry's refusal. */
    async function callerOf(ip: string, authorization: string | undefined): Promise<Caller> {
      const wait = failures?.blockedFor(ip) ?? 0;
      // as for the v1 API: credentials already seen to be valid pass even from a blocked address
      // (everyone behind the gateway shares 127.0.0.1); others are not even looked at
      if (wait > 0 && !knownGood(services, tokens, authorization)) {
        throw new RegistryError('TOOMANYREQUESTS', `too many failed logins from ${ip}; retry after ${wait} s`);
      }
      const who = await authenticate(services, tokens, authorization);
      if (who) {
        const retry = windows?.take(who.user.id) ?? 0;
        if (retry > 0)
          throw new RegistryError(
            'TOOMANYREQUESTS',
            `more than ${windows!.o.max} registry requests in ${Math.round(windows!.o.windowMs / 1000)} s for user ${who.user.name}; retry after ${retry} s`,
            { retry_after_s: retry },
          );
        return who;
      }
      if (authorization) failures?.fail(ip);
      throw new RegistryError(
        'UNAUTHORIZED',
        authorization ? 'invalid credentials' : 'authentication required: log in with your user name and API token',
      );
    }

    /** A scoped token for `who`: what it asked (`scope` values) and may have. */
    function scopedToken(who: Caller, asked: string[]) {
      const scopes = reg.grant(who.user, parseScopes(asked));
      const now = Date.now();
      const token = tokens.issue({
        sub: who.user.id,
        name: who.user.name,
        access: scopes,
        exp: Math.floor(now / 1000) + TOKEN_TTL_S,
      });
      return { token, access_token: token, expires_in: TOKEN_TTL_S, issued_at: new Date(now).toISOString() };
    }

    /**
     * The OAuth2 form of the token endpoint (distribution's token spec,
     * "oauth"): a form-encoded POST with `grant_type=password` (user name
     * and API token) or `grant_type=refresh_token` (the refresh token this
     * endpoint gave: the API token itself, so nothing new is stored by the
     * client), `service`, `scope` (space-separated) and `client_id`.
     * `access_type=offline` asks for a refresh token.
     */
    async function oauthToken(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
      const type = String(req.headers['content-type'] ?? '')
        .split(';')[0]!
        .trim()
        .toLowerCase();
      if (type !== 'application/x-www-form-urlencoded')
        throw new RegistryError('UNSUPPORTED', 'POST /v2/token takes an application/x-www-form-urlencoded form');
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const c of req.raw as AsyncIterable<Buffer>) {
        size += c.length;
        if (size > OAUTH_FORM_MAX) throw new RegistryError('SIZE_INVALID', `the form is over ${OAUTH_FORM_MAX} bytes`);
        chunks.push(c);
      }
      const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
      const grant = form.get('grant_type');
      let secret: string | null;
      let name: string | null = null;
      if (grant === 'password') {
        name = form.get('username');
        secret = form.get('password');
        if (!name || !secret)
          throw new RegistryError('UNAUTHORIZED', "grant_type 'password' needs username and password");
      } else if (grant === 'refresh_token') {
        secret = form.get('refresh_token');
        if (!secret) throw new RegistryError('UNAUTHORIZED', "grant_type 'refresh_token' needs refresh_token");
      } else {
        throw new RegistryError(
          'UNSUPPORTED',
          `grant_type ${grant === null ? 'is missing' : `'${grant.slice(0, 40)}' is not supported`}: use password or refresh_token`,
          undefined,
          400,
        );
      }
      const basic = `Basic ${Buffer.from(`${name ?? ''}:${secret}`).toString('base64')}`;
      // the same checks (and failed-login limit) as any request, by the form's credentials
      const who = await callerOf(req.ip, name === null ? `Bearer ${secret}` : basic);
      if (RegistryTokens.looksLike(secret) || who.scopes)
        throw new RegistryError('UNAUTHORIZED', 'a scoped registry token is not a refresh token: use an API token');
      const t = scopedToken(who, (form.get('scope') ?? '').split(' ').filter(Boolean));
      return reply.send({
        access_token: t.access_token,
        scope: form.get('scope') ?? '',
        expires_in: t.expires_in,
        issued_at: t.issued_at,
        ...(form.get('access_type') === 'offline' ? { refresh_token: secret } : {}),
      });
    }

    async function route(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
      let path: string;
      try {
        path = decodeURIComponent(req.url.split('?')[0]!);
      } catch {
        throw new RegistryError('NAME_INVALID', 'the path is not valid percent-encoding');
      }
      const q = req.query as Record<string, string | undefined>;
      let kind = '';
      let m: RegExpExecArray | null = null;
      for (const [re, k] of ROUTES) {
        m = re.exec(path);
        if (m) {
          kind = k;
          break;
        }
      }
      const method = req.method;
      const bad = (): never => {
        throw new RegistryError(
          'UNSUPPORTED',
          `${method} ${path.slice(0, 120)} is not part of the registry API`,
          undefined,
          405,
        );
      };
      if (!m) throw new RegistryError('NAME_UNKNOWN', `no registry endpoint at ${path.slice(0, 120)}`, undefined, 404);

      if (kind === 'token') {
        if (method === 'POST') return oauthToken(req, reply);
        if (method !== 'GET') bad();
        const who = await caller(req);
        const raw = (req.query as Record<string, string | string[] | undefined>).scope;
        return reply.send(scopedToken(who, raw === undefined ? [] : Array.isArray(raw) ? raw : [raw]));
      }
      const who = await caller(req);
      if (kind === 'base') {
        if (method !== 'GET' && method !== 'HEAD') bad();
        return reply.type('application/json').send(method === 'HEAD' ? undefined : {});
      }
      if (kind === 'catalog') {
        if (method !== 'GET') bad();
        const p = pageParams(req);
        const page = await reg.catalog(who, p.n, p.last);
        linkNext(reply, '/v2/_catalog', page, p.n);
        return reply.send({ repositories: page.items });
      }
      const name = m[1]!;
      if (kind === 'referrers') {
        if (method !== 'GET') bad();
        const artifactType = typeof q.artifactType === 'string' ? q.artifactType : undefined;
        const r = await reg.referrers(who, name, m[2]!, artifactType);
        if (r.filtered) void reply.header('oci-filters-applied', 'artifactType');
        return reply.type('application/vnd.oci.image.index.v1+json').send(JSON.stringify(r.index));
      }
      if (kind === 'tags') {
        if (method !== 'GET') bad();
        const p = pageParams(req);
        const page = await reg.tags(who, name, p.n, p.last);
        linkNext(reply, `/v2/${name}/tags/list`, page, p.n);
        return reply.send({ name, tags: page.items });
      }
      if (kind === 'blob') {
        const digest = m[2]!;
        if (method === 'DELETE') {
          await reg.deleteBlob(who, name, digest);
          return reply.code(202).send();
        }
        if (method !== 'GET' && method !== 'HEAD') bad();
        const b = await reg.blob(who, name, digest);
        void reply.headers({
          'docker-content-digest': b.digest,
          'accept-ranges': 'bytes',
          'content-type': 'application/octet-stream',
        });
        const r = byteRange(req.headers.range, b.size);
        if (r) void reply.code(206).header('content-range', `bytes ${r.start}-${r.end}/${b.size}`);
        void reply.header('content-length', String(r ? r.end - r.start + 1 : b.size));
        if (method === 'HEAD') return reply.send();
        const span = r ? r.end - r.start + 1 : b.size;
        // A small blob is read whole and sent in one write (no stream to set up per request).
        if (span <= SMALL_BLOB) return reply.send(await readSpan(b.path, r?.start ?? 0, span));
        // Large ones through two reused buffers (send-file.ts): Node's file stream allocates a
        // buffer per read, which held a 256 MiB pull to 0.66x of docker-registry (bench/registry)
        reply.hijack();
        reply.raw.writeHead(reply.statusCode, {
          ...(reply.getHeaders() as OutgoingHttpHeaders),
          'x-request-id': req.id,
        });
        try {
          await sendFileSpan(reply.raw, b.path, r?.start ?? 0, span);
        } catch (e) {
          req.log.warn({ digest: b.digest, err: (e as Error).message }, 'registry: a blob could not be sent whole');
        }
        return reply;
      }
      if (kind === 'uploads') {
        if (method !== 'POST') bad();
        if (q.mount !== undefined && q.from !== undefined && (await reg.mount(who, name, q.mount, q.from))) {
          return reply
            .code(201)
            .headers({ location: `/v2/${name}/blobs/${q.mount}`, 'docker-content-digest': q.mount })
            .send();
        }
        const up = await reg.startUpload(who, name);
        if (q.digest !== undefined) {
          try {
            await reg.append(who, name, up.id, req.raw);
            const b = await reg.finish(who, name, up.id, q.digest);
            return reply
              .code(201)
              .headers({ location: `/v2/${name}/blobs/${b.digest}`, 'docker-content-digest': b.digest })
              .send();
          } catch (e) {
            await reg.uploads.remove(up.id);
            throw e;
          }
        }
        return reply
          .code(202)
          .headers({ location: `/v2/${name}/blobs/uploads/${up.id}`, 'docker-upload-uuid': up.id, range: '0-0' })
          .send();
      }
      if (kind === 'upload') {
        const id = m[2]!;
        const loc = { location: `/v2/${name}/blobs/uploads/${id}`, 'docker-upload-uuid': id };
        if (method === 'GET') {
          const { size } = await reg.upload(who, name, id);
          return reply
            .code(204)
            .headers({ ...loc, range: uploadRange(size) })
            .send();
        }
        if (method === 'DELETE') {
          await reg.cancel(who, name, id);
          return reply.code(204).send();
        }
        if (method === 'PATCH') {
          const size = await reg.append(who, name, id, req.raw, contentRange(req.headers['content-range']));
          return reply
            .code(202)
            .headers({ ...loc, range: uploadRange(size) })
            .send();
        }
        if (method === 'PUT') {
          if (q.digest === undefined)
            throw new RegistryError('DIGEST_INVALID', "parameter 'digest' is required to end an upload");
          const hasBody =
            Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
          if (hasBody) await reg.append(who, name, id, req.raw, contentRange(req.headers['content-range']));
          const b = await reg.finish(who, name, id, q.digest);
          return reply
            .code(201)
            .headers({ location: `/v2/${name}/blobs/${b.digest}`, 'docker-content-digest': b.digest })
            .send();
        }
        bad();
      }
      // manifests
      const reference = m[2]!;
      if (method === 'PUT') {
        const body = await readBody(req, MANIFEST_MAX);
        const r = await reg.putManifest(who, name, reference, req.headers['content-type'], body);
        void reply.headers({ location: `/v2/${name}/manifests/${r.digest}`, 'docker-content-digest': r.digest });
        if (r.subject) void reply.header('oci-subject', r.subject);
        return reply.code(201).send();
      }
      if (method === 'DELETE') {
        await reg.deleteManifest(who, name, reference);
        return reply.code(202).send();
      }
      if (method !== 'GET' && method !== 'HEAD') bad();
      const man = await reg.getManifest(who, name, reference);
      void reply.headers({ 'docker-content-digest': man.digest, 'content-length': String(man.body.length) });
      void reply.type(man.mediaType);
      return reply.send(method === 'HEAD' ? undefined : man.body);
    }

    scope.route({
      method: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
      url: '/v2',
      handler,
      config: { rateLimit: false },
      exposeHeadRoute: false,
    });
    scope.route({
      method: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
      url: '/v2/*',
      handler,
      config: { rateLimit: false },
      exposeHeadRoute: false,
    });
  });
}
