import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { openSync, readFileSync, writeSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import type { Scope } from '../domain/registry.js';

const PREFIX = 'uhr1.';

/** What a registry token grants, as signed. */
export interface TokenClaims {
  /** user id */
  sub: string;
  /** user name (for messages) */
  name: string;
  access: Scope[];
  /** expiry, seconds since the epoch */
  exp: number;
}

/**
 * The registry's short-lived scoped tokens (the token flow of the
 * distribution spec: `GET /v2/token`). A token is `uhr1.<claims>.<mac>`,
 * HMAC-SHA256 with a key kept in the data dir (`registry.key`, mode 0600,
 * made on first use), so every API process of one data dir accepts the
 * others' tokens and a restart does not log clients out.
 */
export class RegistryTokens {
  private key: Buffer | undefined;

  constructor(private readonly dataDir: string) {}

  private secret(): Buffer {
    if (this.key) return this.key;
    const path = join(this.dataDir, 'registry.key');
    try {
      this.key = readFileSync(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      const k = randomBytes(32);
      try {
        const fd = openSync(path, 'wx', 0o600);
        writeSync(fd, k);
        closeSync(fd);
        this.key = k;
      } catch (x) {
        if ((x as NodeJS.ErrnoException).code !== 'EEXIST') throw x;
        this.key = readFileSync(path); // another process made it first
      }
    }
    if (this.key.length < 32) throw new Error(`${path} is shorter than 32 bytes: remove it to make a new key`);
    return this.key;
  }

  private mac(body: string): string {
    return createHmac('sha256', this.secret()).update(body).digest('base64url');
  }

  issue(claims: TokenClaims): string {
    const body = Buffer.from(JSON.stringify(claims)).toString('base64url');
    return `${PREFIX}${body}.${this.mac(body)}`;
  }

  static looksLike(token: string): boolean {
    return token.startsWith(PREFIX);
  }

  /** The claims of a valid, unexpired token; undefined otherwise. */
  verify(token: string, nowMs = Date.now()): TokenClaims | undefined {
    if (!token.startsWith(PREFIX) || token.length > 8192) return undefined;
    const [body, mac] = token.slice(PREFIX.length).split('.');
    if (!body || !mac) return undefined;
    const want = Buffer.from(this.mac(body));
    const got = Buffer.from(mac);
    if (want.length !== got.length || !timingSafeEqual(want, got)) return undefined;
    try {
      const c = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as TokenClaims;
      if (typeof c.exp !== 'number' || c.exp * 1000 <= nowMs || !Array.isArray(c.access)) return undefined;
      return c;
    } catch {
      return undefined;
    }
  }
}
