import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { checkName } from '../domain/names.js';
import { err } from '../errors.js';
import type { Config } from '../config.js';
import type { Hard, Limits, QuotaOverrides, Store, Tx, UserRec } from '../store/types.js';

const sha256 = (s: string): Buffer => createHash('sha256').update(s).digest();

/** Effective quotas of a user: defaults with the user's overrides. */
export function effectiveQuotas(config: Config, user: UserRec): { hard: Hard; limits: Limits } {
  return {
    hard: { ...config.defaultQuotas.hard, ...user.quotas.hard },
    limits: { ...config.defaultQuotas.limits, ...user.quotas.limits },
  };
}

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
  private cache = new Map<string, { user: UserRec; until: number }>();

  constructor(
    private readonly store: Store,
    private readonly config: Config,
  ) {
    // A changed user (quotas, permissions) must not be served from the cache.
    store.onChange((c) => {
      if (c.kind === 'user') this.cache.clear();
    });
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

  /** Issues one more token for an existing user. */
  async newToken(name: string): Promise<string> {
    const secret = randomBytes(24).toString('base64url');
    await this.store.tx(async (tx) => {
      const user = await tx.users.getByName(name.toLowerCase());
      if (!user) throw err('UH_NOT_FOUND', `no user '${name}'`);
      await tx.tokens.insert({
        id: randomUUID(),
        user_id: user.id,
        secret_hash: sha256(secret).toString('hex'),
        created_at: new Date().toISOString(),
      });
    });
    return Buffer.from(`${name.toLowerCase()}:${secret}`).toString('base64');
  }

  /**
   * Resolves an `Authorization` header to a user, or undefined. Tokens are
   * `base64("<user>:<secret>")`; the secret's hash is compared in constant
   * time against each of the user's token hashes.
   */
  /** The user of a recently verified token, without touching the store; undefined on a miss. */
  cachedUser(header: string | undefined): UserRec | undefined {
    if (!header || !header.startsWith('Bearer ')) return undefined;
    const hit = this.cache.get(header.slice(7).trim());
    return hit && hit.until > Date.now() ? hit.user : undefined;
  }

  async authenticate(header: string | undefined): Promise<UserRec | undefined> {
    if (!header) return undefined;
    const m = /^Bearer\s+([A-Za-z0-9+/=_-]{4,512})\s*$/i.exec(header);
    if (!m) return undefined;
    const token = m[1]!;
    const hit = this.cache.get(token);
    const now = Date.now();
    if (hit && hit.until > now) return hit.user;
    const decoded = Buffer.from(token, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon <= 0) return undefined;
    const name = decoded.slice(0, colon);
    const secret = sha256(decoded.slice(colon + 1));
    const user = await this.store.read(async (tx) => {
      const u = await tx.users.getByName(name);
      if (!u) return undefined;
      let ok = false;
      for (const t of await tx.tokens.listForUser(u.id)) {
        const h = Buffer.from(t.secret_hash, 'hex');
        if (h.length === secret.length && timingSafeEqual(h, secret)) ok = true;
      }
      return ok ? u : undefined;
    });
    if (user) {
      if (this.cache.size > 10_000) this.cache.clear();
      this.cache.set(token, { user, until: now + 5_000 });
    }
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
