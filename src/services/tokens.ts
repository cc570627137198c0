import type { UserRec } from '../store/types.js';

/** Canonical standard base64 (padding included), as `Buffer#toString('base64')` writes it. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * Splits a bearer token `base64("<user>:<secret>")`. Node's decoder is
 * lenient (it skips characters it does not know and stops at the first
 * `=`), so a token with characters appended would decode to the same
 * secret: only the one canonical encoding is accepted, checked by
 * re-encoding.
 */
export function decodeToken(token: string): { name: string; secret: string } | undefined {
  if (token.length < 4 || token.length > 512 || !BASE64.test(token)) return undefined;
  const raw = Buffer.from(token, 'base64');
  if (raw.toString('base64') !== token) return undefined;
  const text = raw.toString('utf8');
  if (!Buffer.from(text, 'utf8').equals(raw)) return undefined; // not UTF-8: not ours
  const colon = text.indexOf(':');
  if (colon <= 0) return undefined;
  return { name: text.slice(0, colon), secret: text.slice(colon + 1) };
}

interface Entry {
  user: UserRec;
  until: number;
}

/**
 * Recently verified tokens. Only tokens that authenticated enter it, and
 * decoding is canonical, so there is at most one entry per issued token:
 * invalid tokens cannot fill it or evict anyone. When full (more live
 * tokens than `max`), the oldest entry goes, not all of them.
 */
export class TokenCache {
  private readonly m = new Map<string, Entry>();

  constructor(
    private readonly ttlMs: number,
    private readonly max = 10_000,
  ) {}

  get(token: string, now: number): UserRec | undefined {
    const e = this.m.get(token);
    if (!e) return undefined;
    if (e.until > now) return e.user;
    this.m.delete(token);
    return undefined;
  }

  set(token: string, user: UserRec, now: number): void {
    this.m.delete(token);
    while (this.m.size >= this.max) this.m.delete(this.m.keys().next().value!);
    this.m.set(token, { user, until: now + this.ttlMs });
  }

  clear(): void {
    this.m.clear();
  }

  get size(): number {
    return this.m.size;
  }
}
