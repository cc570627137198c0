import postgres from 'postgres';
import { err, isUnihostError } from '../../errors.js';
import { Feed, type FeedRow } from '../feed.js';
import type { FeedEvent, Store, Tx } from '../types.js';
import type { PgTarget } from '../url.js';
import { PG_MIGRATIONS } from './migrations.js';
import { makeTx, type Pending } from './tx.js';

/** Serializes the end of committing transactions, so revisions and event ids follow commit order. */
const COMMIT_LOCK = 0x756e6968; // 'unih'
const MIGRATION_LOCK = 0x756e6d67;
/** Wakes watchers in every process; carries nothing (watchers read the change table). */
const CHANNEL = 'unihost_changes';
/** A lost notification is healed this fast (and a resync in each controller heals the rest). */
const POLL_MS = 1000;
const KEEP_REVISIONS = 10_000;
/** Attempts of a transaction that loses serialization conflicts, before it gives up. */
const MAX_ATTEMPTS = 10;

type Sql = postgres.Sql<Record<string, never>>;

/**
 * SQLSTATEs a transaction is retried on: it lost a race, nothing of it
 * committed. A unique violation (23505) is one too: a concurrent commit took
 * the name, domain or address this one checked was free; run again, the
 * check sees it and answers as for any taken name.
 */
const RETRY_CODES = new Set(['40001', '40P01', '23505']);
/** Errors that mean the server is out of reach (or going away): answered 503. */
const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOENT',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  '57P01',
  '57P02',
  '57P03',
]);

function codeOf(e: unknown): string {
  return String((e as { code?: unknown })?.code ?? '');
}

export const isUnreachable = (e: unknown): boolean => {
  const c = codeOf(e);
  return UNREACHABLE_CODES.has(c) || c.startsWith('08');
};

/**
 * The store on PostgreSQL (docs/architecture.md, "Store"): a pool of
 * connections through postgres.js, one serializable transaction per `tx`
 * (retried here, and only here, when it loses a serialization conflict or a
 * deadlock), reads on a repeatable-read snapshot, and a change feed that
 * LISTEN/NOTIFY only wakes: watchers read the change table themselves.
 */
export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  private readonly feed: Feed;
  private poll: NodeJS.Timeout | undefined;
  private commits = 0;
  private closed = false;
  private feedDown = false;

  private constructor(
    private readonly sql: Sql,
    readonly target: PgTarget,
    private readonly log: (msg: string, e?: unknown) => void,
  ) {
    this.feed = new Feed(
      {
        since: async (after, limit) => {
          const rows = (await this.sql.unsafe(
            'SELECT rev, kind, id FROM changes WHERE rev > $1 ORDER BY rev LIMIT $2',
            [after, limit],
          )) as unknown as FeedRow[];
          if (this.feedDown) {
            this.feedDown = false;
            this.log('the change feed reads again');
          }
          return rows;
        },
        oldest: async () =>
          Number((await this.sql.unsafe('SELECT coalesce(min(rev), 0) AS r FROM changes'))[0]!.r ?? 0),
      },
      // said once per outage, not at every poll
      (e) => {
        if (this.feedDown) return;
        this.feedDown = true;
        this.log('reading the change feed failed; trying again every second', e);
      },
    );
  }

  /**
   * Connects, applies the migrations under an advisory lock, and starts the
   * feed. Throws an error naming where it tried (never the password) when
   * the server cannot be reached.
   */
  static async open(
    target: PgTarget,
    log: (msg: string, e?: unknown) => void = () => undefined,
  ): Promise<PostgresStore> {
    const sql = postgres({
      host: target.host,
      port: target.port,
      database: target.database,
      username: target.user,
      password: target.password || undefined,
      ssl: target.ssl,
      max: target.poolMax,
      connect_timeout: target.connectTimeoutS,
      idle_timeout: 60,
      onnotice: () => undefined,
      connection: { application_name: target.applicationName },
      // int8 columns (sizes, times in µs, revisions) as numbers: they stay far below 2^53
      types: {
        bigint: {
          to: 20,
          from: [20],
          serialize: (x: number) => String(x),
          parse: (x: string) => Number(x),
        },
      },
    }) as unknown as Sql;
    try {
      await sql`SELECT 1`;
    } catch (e) {
      await sql.end({ timeout: 1 }).catch(() => undefined);
      throw new Error(`cannot reach ${target.display}: ${(e as Error).message}`);
    }
    const store = new PostgresStore(sql, target, log);
    try {
      await store.migrate();
      store.feed.start(Number((await sql`SELECT coalesce(max(rev), 0) AS r FROM changes`)[0]!.r));
      await sql.listen(
        CHANNEL,
        () => store.feed.poke(),
        () => store.feed.poke(), // (re)connected: read what a lost connection missed
      );
    } catch (e) {
      await sql.end({ timeout: 1 }).catch(() => undefined);
      throw new Error(`cannot open the store in ${target.display}: ${(e as Error).message}`);
    }
    store.poll = setInterval(() => store.feed.poke(), POLL_MS);
    store.poll.unref();
    return store;
  }

  private async migrate(): Promise<void> {
    await this.sql.begin(async (t) => {
      // released with the transaction; a second daemon waits here, then finds the work done
      await t`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`;
      await t`CREATE TABLE IF NOT EXISTS unihost_schema (version integer NOT NULL)`;
      const rows = await t`SELECT version FROM unihost_schema`;
      let v = rows.length > 0 ? Number(rows[0]!.version) : 0;
      if (rows.length === 0) await t`INSERT INTO unihost_schema (version) VALUES (0)`;
      for (; v < PG_MIGRATIONS.length; v++) {
        await t.unsafe(PG_MIGRATIONS[v]!);
        await t`UPDATE unihost_schema SET version = ${v + 1}`;
      }
    });
  }

  async tx<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once(fn);
      } catch (e) {
        if (isUnihostError(e)) throw e;
        if (isUnreachable(e)) throw unavailable(this.target, e);
        if (!RETRY_CODES.has(codeOf(e))) throw e;
        if (attempt >= MAX_ATTEMPTS)
          throw err(
            'UH_CONFLICT',
            `the change kept conflicting with concurrent changes (${MAX_ATTEMPTS} attempts); nothing was changed, try again`,
          );
        // jittered, growing pause: the transactions that collided do not collide again in lockstep
        await new Promise((r) => setTimeout(r, Math.random() * 2 ** Math.min(attempt, 6)));
      }
    }
  }

  private async once<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    const pending: Pending = { changes: new Map(), events: [] };
    let rev = 0;
    const result = await this.sql.begin('isolation level serializable', async (t) => {
      const r = await fn(makeTx((text, params) => t.unsafe(text, params as never[], { prepare: true }), pending));
      if (pending.changes.size > 0) rev = await this.flush(t, pending);
      return r;
    });
    if (rev > 0) {
      if (++this.commits % 1000 === 0) void this.prune();
      // watchers of this process (waits, caches, controllers) see the change before the caller goes on
      await this.feed.reach(rev);
    }
    return result as T;
  }

  /**
   * Appends the transaction's changes and events, numbered under a lock held
   * until commit: a watcher that has read revision N never finds a change
   * below N committed later. The notification goes out with the commit.
   */
  private async flush(t: postgres.TransactionSql<Record<string, never>>, p: Pending): Promise<number> {
    const kinds = [...p.changes.values()].map((c) => c.kind);
    const ids = [...p.changes.values()].map((c) => c.id);
    const e = p.events;
    const [, revs] = await Promise.all([
      t`SELECT pg_advisory_xact_lock(${COMMIT_LOCK})`,
      t`INSERT INTO changes (rev, kind, id)
          SELECT nextval('revisions'), k, i FROM unnest(${kinds}::text[], ${ids}::text[]) WITH ORDINALITY AS c(k, i, n)
          ORDER BY n RETURNING rev`,
      ...(e.length > 0
        ? [
            t`INSERT INTO events (id, at, user_id, instance_id, instance_name, group_id, type, from_state, to_state)
                SELECT nextval('event_ids'), a, u, i, nm, g, ty, f, tt FROM unnest(
                  ${e.map((x) => x.at)}::text[], ${e.map((x) => x.user_id)}::text[],
                  ${e.map((x) => x.instance_id)}::text[], ${e.map((x) => x.instance_name)}::text[],
                  ${e.map((x) => x.group_id)}::text[], ${e.map((x) => x.type)}::text[],
                  ${e.map((x) => x.from_state)}::text[], ${e.map((x) => x.to_state)}::text[]
                ) WITH ORDINALITY AS ev(a, u, i, nm, g, ty, f, tt, n) ORDER BY n`,
          ]
        : []),
      t`SELECT pg_notify(${CHANNEL}, '')`,
    ]);
    return Math.max(...revs.map((r) => Number(r.rev)));
  }

  private async prune(): Promise<void> {
    try {
      await this.sql`DELETE FROM changes WHERE rev <= (SELECT max(rev) FROM changes) - ${KEEP_REVISIONS}`;
    } catch (e) {
      this.log('pruning the change table failed', e);
    }
  }

  async read<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    try {
      return (await this.sql.begin('isolation level repeatable read read only', (t) =>
        fn(makeTx((text, params) => t.unsafe(text, params as never[], { prepare: true }), null)),
      )) as T;
    } catch (e) {
      if (!isUnihostError(e) && isUnreachable(e)) throw unavailable(this.target, e);
      throw e;
    }
  }

  externalVersion(): number {
    return this.feed.revision();
  }

  watch(from: number | 'now', listener: (e: FeedEvent) => void): () => void {
    return this.feed.watch(from, listener);
  }

  revision(): number {
    return this.feed.revision();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.poll);
    await this.sql.end({ timeout: 5 });
  }
}

function unavailable(target: PgTarget, e: unknown) {
  return err('UH_UNAVAILABLE', `the database is unreachable (${target.display}): ${(e as Error).message}`);
}
