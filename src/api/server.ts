import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { FastifyBaseLogger as Logger } from 'fastify';
import { STATUS_CODES } from 'node:http';
import { ERROR_CODES, isUnihostError, err, type UnihostError } from '../errors.js';
import type { Services } from '../services/index.js';
import type { UserRec } from '../store/types.js';
import { RawArray, type HandlerCtx, type EndpointDef, type Entry, type Result } from './endpoint.js';
import { compile, parseRequest, UUID_RE, type Compiled } from './request.js';
import { ENDPOINTS } from './routes/index.js';
import { listOrGet } from './list.js';
import { buildOpenApi } from './openapi.js';
import { requestId, serveMetrics } from './observe.js';
import { serveEvents } from './events.js';
import { RegistryError } from '../domain/registry.js';
import { isRegistryPath, registerRegistry, sendRegistryError } from './registry.js';
import { isConsolePath, sendPage, serveConsole, wantsPage } from './console.js';
import type { DaemonMetrics } from '../metrics.js';
import {
  AuthFailureLimit,
  authFailureError,
  registerRateLimit,
  type AuthFailureOptions,
  type RateLimitOptions,
} from './rate-limit.js';

declare module 'fastify' {
  interface FastifyRequest {
    t0: bigint;
    user: UserRec | undefined;
  }
}

export interface ApiOptions {
  services: Services;
  logger: Logger;
  /** Prometheus metrics: request latency is recorded and `GET /metrics` served when given */
  metrics?: DaemonMetrics;
  /** largest accepted request body in bytes */
  bodyLimit?: number;
  /** per-user request rate limit; absent or `max: 0` = none */
  rateLimit?: RateLimitOptions;
  /** failed authentications per client address (docs/security.md) */
  authFailures?: AuthFailureOptions;
  /** open `GET /v1/events` streams per user (default 8) */
  eventStreamsPerUser?: number;
  /** the web console's built files (default web/dist); `false` serves no console */
  consoleDir?: string | false;
  /** serve HTTPS with this certificate chain and key (PEM) */
  https?: { cert: string | Buffer; key: string | Buffer };
}

const opTime = (req: FastifyRequest): number => Number((process.hrtime.bigint() - req.t0) / 1000n);

function sendError(req: FastifyRequest, reply: FastifyReply, e: UnihostError): FastifyReply {
  return reply.code(e.http).send({
    status: 'error',
    message: e.message,
    errors: [{ status: e.http, message: e.message, error: e.api }],
    op_time_us: opTime(req),
  });
}

/** The spec's envelope as raw HTTP, for errors Node's parser raises before Fastify sees a request. */
function clientError(e: Error & { code?: string }, socket: import('node:stream').Duplex): void {
  if (e.code === 'ECONNRESET' || socket.destroyed) return;
  const [http, message] =
    e.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'request line and headers are too large (at most 16 KiB together): shorten the query string']
      : e.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'request timed out: the client sent it too slowly']
        : [400, `malformed HTTP request (${e.code ?? 'parse error'})`];
  const api = http === 400 ? ERROR_CODES.UH_MALFORMED.api : ERROR_CODES.UH_TOO_LARGE.api;
  const body = JSON.stringify({
    status: 'error',
    message,
    errors: [{ status: http, message, error: api }],
    op_time_us: 0,
  });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${http} ${STATUS_CODES[http]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(e);
}

/** Errors Fastify's router raises before any hook runs (a path it cannot decode, a segment too long). */
function frameworkError(e: Error & { code?: string }, req: FastifyRequest, reply: FastifyReply): FastifyReply {
  req.t0 = process.hrtime.bigint();
  const path = req.url.split('?')[0]!;
  const shown = path.length > 80 ? `${path.slice(0, 80)}…` : path;
  const message =
    e.code === 'FST_ERR_MAX_PARAM_LENGTH'
      ? `path '${shown}': a segment is longer than ${MAX_PARAM_LENGTH} characters (a UUID has 36)`
      : `path '${shown}' is not a valid URL (bad percent-encoding)`;
  if (isRegistryPath(req.url)) return sendRegistryError(req, reply, new RegistryError('NAME_INVALID', message));
  return sendError(req, reply, err('UH_INVALID', message));
}
const MAX_PARAM_LENGTH = 100;

function noEndpoint(req: FastifyRequest, reply: FastifyReply): FastifyReply {
  return reply.code(404).send({
    status: 'error',
    message: 'No API endpoint',
    errors: [{ status: 404, message: 'No API endpoint', error: 3 }],
    op_time_us: opTime(req),
  });
}

/** Builds the envelope for per-entry results (the API spec's error envelope; docs/errors.md). */
function envelope(plural: string, results: Result[], t0: bigint, totalCount = false): Record<string, unknown> {
  let failed = 0;
  for (const r of results) if (r.status === 'error') failed++;
  const status = failed === 0 ? 'success' : failed === results.length ? 'error' : 'partial_success';
  const out: Record<string, unknown> = { status };
  if (failed > 0) {
    out.message =
      failed === results.length
        ? results.length === 1
          ? String(results[0]!.message)
          : `all ${failed} operations failed`
        : `${failed} of ${results.length} operations failed`;
  }
  out.data = totalCount ? { [plural]: results, total_count: results.length } : { [plural]: results };
  out.op_time_us = Number((process.hrtime.bigint() - t0) / 1000n);
  return out;
}

function entryError(entry: Entry<unknown>, e: unknown, log: Logger): Result {
  const ue = isUnihostError(e) ? e : null;
  if (!ue) log.error({ err: e }, 'unexpected error in entry handler');
  const out: Result = { status: 'error' };
  if (entry.target?.uuid !== undefined) out.uuid = entry.target.uuid;
  if (entry.target?.name !== undefined) out.name = entry.target.name;
  out.message = ue ? ue.message : 'internal error';
  out.error = ue ? ue.api : 0;
  return out;
}

async function each<E extends Entry<unknown>>(
  // read only when an entry fails: the request's child logger is made on first use
  owner: { readonly log: Logger },
  entries: E[],
  fn: (e: E) => Promise<Result>,
  concurrent = false,
): Promise<Result[]> {
  const one = async (e: E): Promise<Result> => {
    try {
      return { status: 'success', ...(await fn(e)) };
    } catch (x) {
      return entryError(e, x, owner.log);
    }
  };
  if (concurrent) return Promise.all(entries.map(one));
  const out: Result[] = [];
  for (const e of entries) out.push(await one(e));
  return out;
}

function expandIds(entries: Entry<Record<string, unknown>>[]): Entry<Record<string, unknown>>[] {
  return entries.flatMap((e, i) => {
    const ids = e.params.ids as { uuid?: string; name?: string }[] | undefined;
    if (ids === undefined) {
      if (!e.target) throw err('UH_MISSING_ID', `entry ${i}: 'uuid', 'name' or 'ids' is required`);
      return [e];
    }
    if (e.target) throw err('UH_NOT_BOTH', `entry ${i}: give either 'ids' or a single target, not both`);
    if (ids.length === 0) throw err('UH_INVALID', `entry ${i}: 'ids' is empty`);
    return ids.map((t, k) => {
      if (t.uuid !== undefined && t.name !== undefined)
        throw err('UH_NOT_BOTH', `ids[${k}]: give either 'uuid' or 'name', not both`);
      if (t.uuid === undefined && t.name === undefined)
        throw err('UH_MISSING_ID', `ids[${k}]: 'uuid' or 'name' is required`);
      const target = t.uuid !== undefined ? { uuid: t.uuid.toLowerCase() } : { name: t.name! };
      return { ...e, target };
    });
  });
}

/** Route parameters other than `uuid` (e.g. a policy name); most routes have none. */
function pathParamsOf(params: Record<string, string>): Record<string, string> {
  let out: Record<string, string> | undefined;
  for (const k in params) if (k !== 'uuid') (out ??= {})[k] = params[k]!;
  return out ?? NO_PARAMS;
}
const NO_PARAMS: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** The per-request context handlers get; methods on the prototype, so a request allocates one small object. */
class RequestCtx implements HandlerCtx {
  readonly user: UserRec;
  private ac: AbortController | undefined;
  private child: Logger | undefined;

  constructor(
    private readonly req: FastifyRequest,
    private readonly reply: FastifyReply,
    readonly services: Services,
  ) {
    this.user = req.user!;
  }

  /** Created on first use (errors, mostly): every line names the request. */
  get log(): Logger {
    return (this.child ??= this.req.log.child({ reqId: this.req.id }));
  }

  /** Created on first use: only blocking endpoints (wait, start, create) need it. */
  get signal(): AbortSignal {
    if (!this.ac) {
      const a = (this.ac = new AbortController());
      // The response's 'close', not the request's: a request emits 'close' once its body is read,
      // which would abort every wait at once; the response closes when sent or when the client left.
      const res = this.reply.raw;
      res.once('close', () => {
        if (!res.writableFinished) a.abort();
      });
    }
    return this.ac.signal;
  }

  each(es: Entry<unknown>[], fn: (e: Entry<unknown>) => Promise<Result>, concurrent?: boolean): Promise<Result[]> {
    return each(this, es, fn, concurrent);
  }

  entryError(e: Entry<unknown>, x: unknown): Result {
    return entryError(e, x, this.log);
  }

  expandIds(entries: Entry<Record<string, unknown>>[]): Entry<Record<string, unknown>>[] {
    return expandIds(entries);
  }
}

async function runEntries(
  c: Compiled,
  ctx: HandlerCtx,
  entries: Entry<Record<string, unknown>>[],
  q: Record<string, unknown>,
) {
  const def = c.def as EndpointDef;
  if (def.list) return listOrGet(def, ctx, entries, q);
  if (def.handleAll) return def.handleAll(ctx, entries, q);
  return each(ctx, entries, (e) => def.handle!(ctx, e, q), def.concurrent);
}

/**
 * Builds the Fastify application serving the v1 API. Every route is
 * generated from the endpoint table; handlers only parse and delegate.
 */
export function buildApi(opts: ApiOptions): FastifyInstance {
  const { services } = opts;
  const app = Fastify({
    ...(opts.https ? { https: opts.https } : {}),
    loggerInstance: opts.logger,
    bodyLimit: opts.bodyLimit ?? 1024 * 1024,
    logController: new LogController({ disableRequestLogging: true }),
    // No child logger per request: requests are not logged, and a child costs more than the rest of a GET.
    childLoggerFactory: (logger) => logger,
    return503OnClosing: true,
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: frameworkError,
    clientErrorHandler: clientError,
    genReqId: requestId,
  });

  // Every method may carry a JSON body, GET included (as the API spec allows), whatever content type the client declares.
  app.addHttpMethod('GET', { hasBody: true, overrideExisting: true });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    const text = (body as string).trim();
    if (text === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch (e) {
      done(err('UH_MALFORMED', `malformed JSON body: ${(e as Error).message}`), undefined);
    }
  });

  app.decorateRequest('t0', 0n);
  app.decorateRequest('user', undefined);
  const hasConsole = opts.consoleDir !== false && serveConsole(app as unknown as FastifyInstance, opts.consoleDir);
  const failures = opts.authFailures && opts.authFailures.max > 0 ? new AuthFailureLimit(opts.authFailures) : undefined;
  // Callback style: a cached token costs no promise on the hot path.
  app.addHook('onRequest', (req, reply, done) => {
    req.t0 = process.hrtime.bigint();
    if (isRegistryPath(req.url)) return done(); // the registry authenticates its own way (src/api/registry.ts)
    if (hasConsole && isConsolePath(req)) return done(); // the console's files; its API calls carry the token
    // a token this daemon has already seen to be valid passes even from a blocked address (users behind
    // one NAT with a guesser); any other token from a blocked address is not even looked at
    const hit = services.users.cachedUser(req.headers.authorization);
    if (hit) {
      req.user = hit;
      return done();
    }
    const wait = failures?.blockedFor(req.ip) ?? 0;
    if (wait > 0) {
      void reply.header('retry-after', String(wait));
      return void sendError(req, reply, authFailureError(req.ip, opts.authFailures!, wait));
    }
    services.users.authenticate(req.headers.authorization).then((user) => {
      if (!user) {
        failures?.fail(req.ip);
        return void sendError(req, reply, err('UH_UNAUTHORIZED', 'missing or invalid bearer token'));
      }
      req.user = user;
      done();
    }, done);
  });

  if (opts.metrics) serveMetrics(app, opts.metrics);
  serveEvents(app, services, opts.eventStreamsPerUser ?? 8);
  registerRegistry(app, services, failures, opts.rateLimit);

  app.setErrorHandler((e: Error & { code?: string; statusCode?: number }, req, reply) => {
    if (isUnihostError(e)) return sendError(req, reply, e);
    if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      return sendError(req, reply, err('UH_TOO_LARGE', 'request body is too large'));
    }
    if (e.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      const ct = String(req.headers['content-type']).slice(0, 80);
      return sendError(req, reply, err('UH_INVALID', `header 'content-type': '${ct}' is not a media type; send JSON`));
    }
    if (e.statusCode && e.statusCode >= 400 && e.statusCode < 500) {
      return sendError(req, reply, err('UH_INVALID', e.message));
    }
    req.log.error({ err: e, reqId: req.id }, 'unhandled error');
    return sendError(req, reply, err('UH_INTERNAL', 'internal error'));
  });

  app.setNotFoundHandler(noEndpoint);
  // `GET /v1/instances/start` matches `/v1/instances/:uuid`; it is a wrong method on an existing path, not a bad UUID.
  const staticPaths = new Set(ENDPOINTS.map((d) => d.path).filter((p) => !p.includes(':')));
  const isOtherRoute = (req: FastifyRequest): boolean => staticPaths.has(req.url.split('?')[0]!.replace(/\/+$/, ''));

  if (opts.rateLimit) registerRateLimit(app as unknown as FastifyInstance, opts.rateLimit);
  // In a plugin, so the routes are added after the rate limiter (registered above) has loaded.
  void app.register(async (scope) =>
    addRoutes(scope as unknown as FastifyInstance, services, isOtherRoute, hasConsole),
  );
  return app as unknown as FastifyInstance;
}

/** A plain word where a UUID goes (`/v1/instances/history`) is a path this API lacks, not a mistyped UUID. */
const isWord = (segment: string): boolean => /^[a-z_]+$/i.test(segment);

/** The endpoint table's routes, and the few fixed ones. */
function addRoutes(
  app: FastifyInstance,
  services: Services,
  isOtherRoute: (req: FastifyRequest) => boolean,
  hasConsole: boolean,
): void {
  for (const def of ENDPOINTS) {
    const c = compile(def as EndpointDef);
    const handler = async (req: FastifyRequest, reply: FastifyReply) => {
      const params = req.params as Record<string, string>;
      const pathUuid = params.uuid;
      if (pathUuid !== undefined && !UUID_RE.test(pathUuid) && (isOtherRoute(req) || isWord(pathUuid)))
        return noEndpoint(req, reply);
      const parsed = parseRequest(
        c,
        req.body,
        req.query as Record<string, string | string[]>,
        pathUuid,
        pathParamsOf(params),
      );
      const ctx = new RequestCtx(req, reply, services);
      const results = await runEntries(c, ctx, parsed.entries, parsed.query);
      if (results instanceof RawArray) {
        // Large lists come from the store as JSON text: splice it in instead of re-serializing.
        const t = Number((process.hrtime.bigint() - req.t0) / 1000n);
        return reply
          .type('application/json; charset=utf-8')
          .send(`{"status":"success","data":{"${def.plural}":${results.json}},"op_time_us":${t}}`);
      }
      return reply.send(envelope(def.plural, results, req.t0, def.totalCount));
    };
    app.route({ method: def.method, url: def.path, handler });
    if (def.localPath) app.route({ method: def.method, url: def.localPath, handler });
  }

  const doc = buildOpenApi(ENDPOINTS as EndpointDef[]);
  app.get('/v1/openapi.json', async () => doc);
  app.get('/v1/healthz', async (req) => ({
    status: 'success',
    data: { health: [{ status: 'success' }] },
    op_time_us: opTime(req),
  }));
  // A browser gets the web console; any other client the API's greeting.
  app.get('/', async (req, reply) =>
    hasConsole && wantsPage(req)
      ? sendPage(reply)
      : { status: 'success', message: 'unihost API v1', op_time_us: opTime(req) },
  );
}
