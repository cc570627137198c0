import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { checkName } from '../domain/names.js';
import { err } from '../errors.js';
import type { Config } from '../config.js';
import type { Hard, QuotaOverrides, Store, Tx, UserRec } from '../store/types.js';
import { decodeToken, TokenCache } from './tokens.js';
import { effectiveQuotas } from '../domain/quotas.js';

const sha256 = (s: string): Buffer => createHash('sha256').update(s).digest();

export { effectiveQuotas };

/**
 * Checks inside a transaction that adding `delta` to the user's usage keeps
 * every hard quota; throws UH_QUOTA naming the first one exceeded.
 */
export async function assertQuota(tx: Tx, config: Config, user: UserRec, delta: Partial<Hard>): Promise<void> {
  const used = await tx.usage(user.id);
  // The request's user may come from the token cache; the limits that count are the committed ones.
  const { hard } = effectiveQuotas(config, (await tx.users.get(user.id)) ?? user);
  for (const [k, d] of Object.entries(delta) as [keyof Hard, number][]) {
    if (!d || d <= 0) continue;
    if (used[k] + d > hard[k]) {
      throw err('UH_QUOTA', `quota '${k}' exceeded: ${used[k]} used + ${d} requested > ${hard[k]} allowed`);
    }
  }
}

/** Users, their bearer tokens and their quotas. */
export class UserService {
  private readonly cache = new TokenCache(5_000);
  /** the store's external version the cache entries were verified against */
  private version: number;

  constructor(
    private readonly store: Store,
    private readonly config: Config,
  ) {
    this.version = store.externalVersion();
    // A changed user (quotas, permissions) or token (revoked) must not be served from the cache.
    store.watch('now', (e) => {
      if (e.type === 'resync' || e.kind === 'user') this.cache.clear();
    });
  }

  /** Drops the cache when another process (the admin commands: revoke, quotas) wrote to the store. */
  private syncExternal(): void {
    const v = this.store.externalVersion();
    if (v !== this.version) {
      this.version = v;
      this.cache.clear();
    }
  }

  /** Creates a user and its first token. Returns the token (shown once). */
  async create(name: string, developer: boolean): Promise<{ user: UserRec; token: string }> {
    const r = checkName(name);
    if (!r.ok) throw err('UH_INVALID', `user name '${name}' is invalid: it ${r.why}`);
    if (r.name === 'official') throw err('UH_INVALID', "user name 'official' is reserved for official images");
    const user: UserRec = {
      id: randomUUID(),
      name: r.name,
      developer,
      created_at: new Date().toISOString(),
      quotas: {},
    };
    const secret = randomBytes(24).toString('base64url');
    await this.store.tx(async (tx) => {
      if (await tx.users.getByName(user.name)) throw err('UH_EXISTS', `user '${user.name}' already exists`);
      await tx.users.insert(user);
      await tx.tokens.insert({
        id: randomUUID(),
        user_id: user.id,
        secret_hash: sha256(secret).toString('hex'),
        created_at: user.created_at,
      });
    });
    return { user, token: Buffer.from(`${user.name}:${secret}`).toString('base64') };
  }

  /** Issues one more token for an existing user; returns it (shown once) and its id (for revocation). */
  async newToken(name: string): Promise<{ token: string; id: string }> {
    const secret = randomBytes(24).toString('base64url');
    const id = randomUUID();
    await this.store.tx(async (tx) => {
      const user = await tx.users.getByName(name.toLowerCase());
      if (!user) throw err('UH_NOT_FOUND', `no user '${name}'`);
      await tx.tokens.insert({
        id,
        user_id: user.id,
        secret_hash: sha256(secret).toString('hex'),
        created_at: new Date().toISOString(),
      });
    });
    return { token: Buffer.from(`${name.toLowerCase()}:${secret}`).toString('base64'), id };
  }

  /** Lists a user's tokens (ids and creation times; the secrets are not stored). */
  async tokens(name: string): Promise<{ id: string; created_at: string }[]> {
    return this.store.read(async (tx) => {
      const user = await tx.users.getByName(name.toLowerCase());
      if (!user) throw err('UH_NOT_FOUND', `no user '${name}'`);
      const list = await tx.tokens.listForUser(user.id);
      return list
        .map((t) => ({ id: t.id, created_at: t.created_at }))
        .sort((a, b) => (a.created_at < b.created_at ? -1 : 1));
    });
  }

  /**
   * Revokes one token of a user (by id) or all of them; returns the ids
   * revoked. The token answers 401 from the next request on, in this
   * process (change listener) and in a daemon that did not make the change
   * (external version check).
   */
  async revokeTokens(name: string, which: { all: true } | { id: string }): Promise<string[]> {
    return this.store.tx(async (tx) => {
      const user = await tx.users.getByName(name.toLowerCase());
      if (!user) throw err('UH_NOT_FOUND', `no user '${name}'`);
      const list = await tx.tokens.listForUser(user.id);
      const gone = 'all' in which ? list : list.filter((t) => t.id === which.id.toLowerCase());
      if (gone.length === 0 && !('all' in which))
        throw err('UH_NOT_FOUND', `user '${user.name}' has no token '${which.id}'`);
      for (const t of gone) await tx.tokens.delete(t.id);
      return gone.map((t) => t.id);
    });
  }

  /** The user of a recently verified token, without touching the store; undefined on a miss. */
  cachedUser(header: string | undefined): UserRec | undefined {
    if (!header || !header.startsWith('Bearer ')) return undefined;
    this.syncExternal();
    return this.cache.get(header.slice(7).trim(), Date.now());
  }

  /**
   * Resolves an `Authorization` header to a user, or undefined. Tokens are
   * `base64("<user>:<secret>")` in canonical encoding; the secret's hash is
   * compared in constant time against each of the user's token hashes.
   */
  async authenticate(header: string | undefined): Promise<UserRec | undefined> {
    if (!header) return undefined;
    const m = /^Bearer\s+(\S{1,1024})\s*$/i.exec(header);
    if (!m) return undefined;
    const token = m[1]!;
    this.syncExternal();
    const now = Date.now();
    const hit = this.cache.get(token, now);
    if (hit) return hit;
    const parts = decodeToken(token);
    if (!parts) return undefined;
    const secret = sha256(parts.secret);
    const user = await this.store.read(async (tx) => {
      const u = await tx.users.getByName(parts.name);
      if (!u) return undefined;
      let ok = false;
      for (const t of await tx.tokens.listForUser(u.id)) {
        const h = Buffer.from(t.secret_hash, 'hex');
        if (h.length === secret.length && timingSafeEqual(h, secret)) ok = true;
      }
      return ok ? u : undefined;
    });
    if (user) this.cache.set(token, user, now);
    return user;
  }

  /** Sets quota overrides for a user (admin). Values not given keep their current value. */
  async setQuotas(name: string, overrides: QuotaOverrides): Promise<UserRec> {
    return this.store.tx(async (tx) => {
      const user = await tx.users.getByName(name.toLowerCase());
      if (!user) throw err('UH_NOT_FOUND', `no user '${name}'`);
      const quotas: QuotaOverrides = {
        hard: { ...user.quotas.hard, ...overrides.hard },
        limits: { ...user.quotas.limits, ...overrides.limits },
      };
      await tx.users.update(user.id, { quotas });
      return { ...user, quotas };
    });
  }

  async list(): Promise<UserRec[]> {
    return this.store.read((tx) => tx.users.list());
  }

  /** The quota record of `GET /v1/users/quotas`. */
  async quotas(user: UserRec): Promise<Record<string, unknown>> {
    const { used, fresh } = await this.store.read(async (tx) => ({
      used: await tx.usage(user.id),
      fresh: await tx.users.get(user.id),
    }));
    const { hard, limits } = effectiveQuotas(this.config, fresh ?? user);
    return { uuid: user.id, used, hard, limits };
  }
}
