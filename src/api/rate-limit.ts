import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { err } from '../errors.js';

export interface RateLimitOptions {
  /** requests one user may send per window; 0 turns the limit off */
  max: number;
  windowMs: number;
}

/**
 * Per-user request rate limit. It runs as a route hook, after the
 * authentication hook: requests are counted per authenticated user (all
 * the user's tokens share one budget); a request over the budget answers
 * 429 `UH_TOO_MANY` with `Retry-After` (seconds) in the spec's envelope.
 * Routes registered in a plugin after this one are covered.
 */
export function registerRateLimit(app: FastifyInstance, o: RateLimitOptions): void {
  if (o.max <= 0) return;
  void app.register(rateLimit, {
    max: o.max,
    timeWindow: o.windowMs,
    hook: 'onRequest',
    // Unauthenticated requests never get here (401 first); the address is only a fallback.
    keyGenerator: (req: FastifyRequest) => req.user?.id ?? `ip:${req.ip}`,
    errorResponseBuilder: (_req, ctx) =>
      err(
        'UH_TOO_MANY',
        `rate limit exceeded: more than ${ctx.max} requests in ${ctx.after} for this user; retry after ${Math.ceil(ctx.ttl / 1000)} s`,
      ),
  });
}
