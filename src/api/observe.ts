import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { err } from '../errors.js';
import type { DaemonMetrics } from '../metrics.js';

/** What an incoming `X-Request-Id` may look like: it goes into logs, so no spaces, quotes or control characters. */
const REQUEST_ID_RE = /^[A-Za-z0-9._:@-]{1,128}$/;

/**
 * The request id (Fastify's `genReqId`): the client's `X-Request-Id` when it
 * is a plausible id, so a caller can follow its request through the logs;
 * else a new UUID. The reply carries it back in `X-Request-Id`.
 */
export function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID_RE.test(given) ? given : randomUUID();
}

/**
 * Request ids on replies and in a debug log line per request, request
 * latency into the metrics, and `GET /metrics` (Prometheus text format).
 * The figures are platform-wide, so only developer (operator) accounts may
 * read them.
 */
export function serveMetrics(app: FastifyInstance, metrics: DaemonMetrics): void {
  app.addHook('onSend', (req, reply, payload, done) => {
    reply.header('x-request-id', req.id);
    done(null, payload);
  });
  app.addHook('onResponse', (req, reply, done) => {
    const seconds = Number(process.hrtime.bigint() - req.t0) / 1e9;
    // The path pattern, not the URL: UUIDs in paths would make a series per object.
    const route = req.routeOptions.url ?? 'unmatched';
    metrics.observeRequest(req.method, route, reply.statusCode, seconds);
    if ((req.log as Logger).isLevelEnabled('debug')) {
      req.log.debug(
        { reqId: req.id, method: req.method, route, status: reply.statusCode, ms: seconds * 1000 },
        'request',
      );
    }
    done();
  });
  app.get('/metrics', async (req, reply) => {
    if (!req.user?.developer) throw err('UH_NOT_ALLOWED', 'metrics are platform-wide: a developer account is needed');
    const { contentType, body } = await metrics.render();
    return reply.type(contentType).send(body);
  });
}
