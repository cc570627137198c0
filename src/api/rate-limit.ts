import rateLimit from '@fastify/rate-limit';
import { LRUCache } from 'lru-cache';
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

/**
 * Requests per key and fixed window, for routes outside Fastify's limiter
 * (the registry answers in its own error form). Keys live in a bounded LRU.
 */
export class RequestWindows {
  private readonly seen: LRUCache<string, { n: number; until: number }>;

  constructor(readonly o: RateLimitOptions) {
    this.seen = new LRUCache({ max: 100_000 });
  }

  /** Counts a request of `key`: 0 when it may go, else the seconds until its window ends. */
  take(key: string, now = Date.now()): number {
    if (this.o.max <= 0) return 0;
    let e = this.seen.get(key);
    if (!e || e.until <= now) {
      e = { n: 0, until: now + this.o.windowMs };
      this.seen.set(key, e);
    }
    e.n++;
    return e.n > this.o.max ? Math.max(1, Math.ceil((e.until - now) / 1000)) : 0;
  }
}

export interface AuthFailureOptions {
  /** failed authentications one client address may make per window; 0 turns the limit off */
  max: number;
  windowMs: number;
}

/**
 * Failed authentications per client address: beyond `max` in a window
 * (counted from the first failure), a request from that address answers
 * 429 until the window ends unless its token is one the daemon has already
 * seen to be valid (its token cache): users behind one NAT with a guesser
 * keep working, while a guess is not even looked at while blocked, so its
 * answer tells nothing. Addresses are kept in a bounded LRU, so a flood of
 * addresses cannot grow memory.
 */
export class AuthFailureLimit {
  private readonly seen: LRUCache<string, { n: number; until: number }>;

  constructor(private readonly o: AuthFailureOptions) {
    this.seen = new LRUCache({ max: 100_000 });
  }

  /** Seconds the address must wait, or 0 when it may try. */
  blockedFor(address: string, now = Date.now()): number {
    const e = this.seen.get(address);
    if (!e || e.until <= now) return 0;
    return e.n > this.o.max ? Math.ceil((e.until - now) / 1000) : 0;
  }

  fail(address: string, now = Date.now()): void {
    const e = this.seen.get(address);
    if (!e || e.until <= now) this.seen.set(address, { n: 1, until: now + this.o.windowMs });
    else e.n++;
  }
}

/** 429 for an address over its failed-authentication budget. */
export function authFailureError(address: string, o: AuthFailureOptions, retryAfterS: number) {
  return err(
    'UH_TOO_MANY',
    `too many failed authentications from ${address}: more than ${o.max} in ${o.windowMs / 1000} s; ` +
      `retry after ${retryAfterS} s`,
  );
}
