import { createHash } from 'node:crypto';
import pg from 'pg';
import pLimit, { type LimitFunction } from 'p-limit';
import { err, isUnihostError } from '../../errors.js';
import { Feed, type FeedRow } from '../feed.js';
import type { Row } from '../tables.js';
import type { FeedEvent, LeaseRenewal, LeaseRenewalOptions, LeaseRenewals, Store, Tx, TxOptions } from '../types.js';
import type { PgTarget } from '../url.js';
import { ReadCache } from './cache.js';
import { startLeaseRenewals } from './lease-worker.js';
import { Listener } from './listen.js';
import { PG_MIGRATIONS } from './migrations.js';
import { makeTx, RENEW_LEASE_SQL, type Pending, type Query } from './tx.js';

/**
 * Serializes the end of committing transactions, so revisions and event ids
 * follow commit order; held (a session lock) from before the commit until the
 * transaction's changes are published after it (`publish`).
 */
const COMMIT_LOCK = 0x756e6968; // 'unih'
const MIGRATION_LOCK = 0x756e6d67;
/** Wakes watchers in every process; carries nothing (watchers read the change table). */
export const CHANNEL = 'unihost_changes';
/** A lost notification is healed this fast (and a resync in each controller heals the rest). */
const POLL_MS = 1000;
const KEEP_REVISIONS = 10_000;
/**
 * A transaction that loses serialization conflicts is run again for this
 * long (and at least MIN_ATTEMPTS times) before it gives up: under a burst
 * of boots on several hosts a create can lose ten in a row within 0.3 s
 * (docs/benchmarks.md, bench/hosts), and a slow answer beats "try again".
 */
const CONFLICT_BUDGET_MS = 5000;
const MIN_ATTEMPTS = 10;

/**
 * SQLSTATEs a transaction is retried on: it lost a race, nothing of it
 * committed. A unique violation (23505) is one too: a concurrent commit took
 * the name, domain or address this one checked was free; run again, the
 * check sees it and answers as for any taken name.
 */
const RETRY_CODES = new Set(['40001', '40P01', '23505']);
/** Errors that mean the server is out of reach (or going away): answered 503. */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOENT', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH']);

function codeOf(e: unknown): string {
  return String((e as { code?: unknown })?.code ?? '');
}

/** The server is out of reach, or going away (node-postgres says so in words for a cut connection). */
export const isUnreachable = (e: unknown): boolean => {
  const c = codeOf(e);
  if (UNREACHABLE_CODES.has(c) || c.startsWith('08') || c.startsWith('57P')) return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error|Client was closed/i.test(
    (e as Error)?.message ?? '',
  );
};

/**
 * A statement this connection prepared before another process changed the
 * schema under it (a rolling upgrade added a column: `SELECT *` answers
 * with another row type). The connection's copy never heals: it is dropped,
 * and the statement runs again on another.
 */
export const isStalePlan = (e: unknown): boolean =>
  codeOf(e) === '0A000' && /cached plan must not change result type/.test((e as Error)?.message ?? '');

/** int8 (sizes, times in µs, revisions) as numbers: they stay far below 2^53. */
const types = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === 20
      ? (v: string) => Number(v)
      : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

/**
 * Publishes what committed up to revision `rev`, in one statement (read
 * committed), by the holder of COMMIT_LOCK right after its commit: numbers the events that have no `user_seq` yet (each user's in id
 * order after that user's newest number: 1, 2, 3 ...), then moves the feed's
 * head (`feed_head`, the newest revision readers may see) to `rev`. Readers
 * of the feed never see a change before its events have their numbers. A
 * process that died between its commit and this leaves both to the next
 * commit of any process (its revisions are below that one's), or to the
 * next store opened.
 */
async function publish(c: pg.ClientBase, rev: number): Promise<void> {
  await c.query(publishSql(rev));
}

/** publish's statement, its revision written in (a number: nothing to quote), for a batch of statements. */
function publishSql(rev: number): string {
  if (!Number.isSafeInteger(rev)) throw new Error(`not a revision: ${rev}`);
  return `WITH numbered AS (
       UPDATE events e SET user_seq = n.seq
         FROM (SELECT u.id, coalesce((SELECT max(x.user_seq) FROM events x WHERE x.user_id = u.user_id), 0)
                          + row_number() OVER (PARTITION BY u.user_id ORDER BY u.id) AS seq
                 FROM events u WHERE u.user_seq IS NULL) n
        WHERE e.id = n.id RETURNING 1)
     UPDATE feed_head SET rev = greatest(rev, ${rev})`;
}

/** Connection settings of a target, for the pool and the listener. */
export function clientConfig(target: PgTarget): pg.ClientConfig {
  return {
    host: target.host,
    port: target.port,
    database: target.database,
    user: target.user,
    password: target.password || undefined,
    ssl:
      target.ssl === false
        ? false
        : target.ssl === 'verify-full'
          ? { rejectUnauthorized: true }
          : { rejectUnauthorized: false },
    connectionTimeoutMillis: target.connectTimeoutS * 1000,
    application_name: target.applicationName,
    types,
  };
}

/** A statement with its parameters, prepared once per connection under a name derived from its text. */
const named = (text: string, values: unknown[] = []): pg.QueryConfig => ({
  name: `u${createHash('sha1').update(text).digest('hex').slice(0, 16)}`,
  text,
  values,
});

/**
 * The store on PostgreSQL (docs/architecture.md, "Store"), through
 * node-postgres: a pool of connections, one serializable transaction per
 * `tx` (read committed on a locked row for one instance's own record,
 * `TxOptions.instance`; retried here, and only here, when it loses a
 * serialization conflict or a deadlock), reads straight on the pool, and a change feed that
 * LISTEN/NOTIFY only wakes: watchers read the change table themselves.
 */
export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  private readonly feed: Feed;
  private readonly cache = new ReadCache();
  private readonly lockQueues = new Map<string, LimitFunction>();
  /** the read-only Tx over the pool (built once: a Tx is a bundle of closures) */
  private readonly reader: Tx;
  private listener: Listener | undefined;
  private poll: NodeJS.Timeout | undefined;
  private commits = 0;
  private closed = false;
  private feedDown = false;

  private constructor(
    private readonly pool: pg.Pool,
    readonly target: PgTarget,
    private readonly log: (msg: string, e?: unknown) => void,
  ) {
    const q: Query = async (text, params) => {
      for (let attempt = 1; ; attempt++) {
        const c = await pool.connect();
        try {
          const rows = (await c.query(named(text, params))).rows as Row[];
          c.release();
          return rows;
        } catch (e) {
          // a connection with a stale statement is dropped; another may have one too (one per connection)
          c.release(isStalePlan(e) || isUnreachable(e));
          if (!isStalePlan(e) || attempt > (pool.options.max ?? 10)) throw e;
        }
      }
    };
    this.reader = this.cache.wrap(makeTx(q, null));
    this.feed = new Feed(
      {
        since: async (after, limit) => {
          // up to the published head: a change is seen once its events have their numbers (publish)
          const rows = (await q(
            'SELECT rev, kind, id FROM changes WHERE rev > $1 AND rev <= (SELECT rev FROM feed_head) ORDER BY rev LIMIT $2',
            [after, limit],
          )) as unknown as FeedRow[];
          if (this.feedDown) {
            this.feedDown = false;
            this.cache.enable(true);
            this.log('the change feed reads again');
          }
          return rows;
        },
        oldest: async () => Number((await q('SELECT coalesce(min(rev), 0) AS r FROM changes'))[0]!.r ?? 0),
      },
      // said once per outage, not at every poll
      (e) => {
        if (this.feedDown) return;
        this.feedDown = true;
        this.cache.enable(false);
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
    const pool = new pg.Pool({ ...clientConfig(target), max: target.poolMax, idleTimeoutMillis: 60_000 });
    // an idle connection the server drops must not take the process down: the next query reconnects
    pool.on('error', (e) => log('a pooled PostgreSQL connection failed', e));
    // pg-pool hands a client to a waiter, dropping its idle listener, while the parser is still inside the
    // chunk that released it; a FATAL the server sent in the same chunk (a fast shutdown) is then emitted
    // with no listener and would throw at the process. The client is marked not queryable all the same,
    // so its next query fails and it is dropped: this listener only keeps the process up.
    pool.on('connect', (c) => c.on('error', () => undefined));
    try {
      await pool.query('SELECT 1');
    } catch (e) {
      await pool.end().catch(() => undefined);
      throw new Error(`cannot reach ${target.display}: ${(e as Error).message}`);
    }
    const store = new PostgresStore(pool, target, log);
    try {
      await store.migrate();
      await store.publishLeftovers();
      const head = await pool.query('SELECT rev AS r FROM feed_head');
      store.feed.start(Number(head.rows[0].r));
      // the first watcher: stale entries go before any other watcher re-reads
      store.feed.watch('now', (e) => store.cache.onFeed(e));
      store.listener = new Listener(clientConfig(target), CHANNEL, () => store.feed.poke(), log);
      await store.listener.start();
    } catch (e) {
      await store.listener?.stop();
      await pool.end().catch(() => undefined);
      throw new Error(`cannot open the store in ${target.display}: ${(e as Error).message}`);
    }
    store.poll = setInterval(() => store.feed.poke(), POLL_MS);
    store.poll.unref();
    return store;
  }

  /**
   * A pooled connection for a transaction. While it is checked out, the pool
   * no longer listens for its errors: a connection the server cuts between
   * two queries would throw at the process; here it only marks it broken
   * (the next query on it fails and the attempt ends with the reason).
   */
  private async checkout(): Promise<{ c: pg.PoolClient; done: (broken: boolean) => void }> {
    const c = await this.pool.connect();
    let failed = false;
    const onError = (e: Error) => {
      failed = true;
      this.log('a PostgreSQL connection in use failed', e);
    };
    c.on('error', onError);
    return {
      c,
      done: (broken) => {
        c.off('error', onError);
        c.release(broken || failed);
      },
    };
  }

  /** Publishes what a process that died between its commit and its `publish` left. */
  private async publishLeftovers(): Promise<void> {
    const { c, done } = await this.checkout();
    let broken = false;
    try {
      await c.query('SELECT pg_advisory_lock($1)', [COMMIT_LOCK]);
      try {
        const head = await c.query('SELECT coalesce(max(rev), 0) AS r FROM changes');
        await publish(c, Number(head.rows[0].r));
      } finally {
        await c.query('SELECT pg_advisory_unlock($1)', [COMMIT_LOCK]).catch(() => (broken = true));
      }
    } finally {
      done(broken);
    }
  }

  private async migrate(): Promise<void> {
    const { c, done } = await this.checkout();
    try {
      await c.query('BEGIN');
      // released with the transaction; a second daemon waits here, then finds the work done
      await c.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await c.query('CREATE TABLE IF NOT EXISTS unihost_schema (version integer NOT NULL)');
      const rows = (await c.query('SELECT version FROM unihost_schema')).rows;
      let v = rows.length > 0 ? Number(rows[0].version) : 0;
      if (rows.length === 0) await c.query('INSERT INTO unihost_schema (version) VALUES (0)');
      for (; v < PG_MIGRATIONS.length; v++) {
        await c.query(PG_MIGRATIONS[v]!);
        await c.query('UPDATE unihost_schema SET version = $1', [v + 1]);
      }
      await c.query('COMMIT');
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      done(false);
    }
  }

  async tx<T>(fn: (tx: Tx) => Promise<T>, o: TxOptions = {}): Promise<T> {
    const locks = new Set(o.locks ?? []);
    const giveUpAt = Date.now() + CONFLICT_BUDGET_MS;
    for (let attempt = 1; ; attempt++) {
      try {
        const { result, rev } = await this.queued(locks, () => this.once(fn, locks, o.instance));
        if (rev > 0) {
          if (++this.commits % 1000 === 0) void this.prune();
          // watchers of this process (waits, caches, controllers) see the change before the caller goes on;
          // after the connection and its locks are back: the feed's read needs a pooled connection
          await this.feed.reach(rev);
        }
        return result;
      } catch (e) {
        // a lock asked for inside: run again with it taken first (not a conflict: no attempt spent)
        if (e instanceof NeedsLock && !locks.has(e.lock)) {
          locks.add(e.lock);
          attempt--;
          continue;
        }
        if (isUnihostError(e)) throw e;
        if (isUnreachable(e)) throw unavailable(this.target, e);
        if (!RETRY_CODES.has(codeOf(e)) && !isStalePlan(e)) throw e;
        if (attempt >= MIN_ATTEMPTS && Date.now() >= giveUpAt)
          throw err(
            'UH_CONFLICT',
            `the change kept conflicting with concurrent changes (${attempt} attempts in ${CONFLICT_BUDGET_MS / 1000} s); nothing was changed, try again`,
          );
        // jittered, growing pause (at most 128 ms): the transactions that collided do not collide again in lockstep
        await new Promise((r) => setTimeout(r, Math.random() * 2 ** Math.min(attempt, 7)));
      }
    }
  }

  /**
   * Transactions that take the same locks queue in this process first: one
   * pooled connection per lock set waits on the server's lock, not one per
   * request (which could hold every connection of the pool while waiting).
   */
  private queued<R>(locks: Set<string>, run: () => Promise<R>): Promise<R> {
    if (locks.size === 0) return run();
    const key = [...locks].sort().join(',');
    let limit = this.lockQueues.get(key);
    if (!limit) this.lockQueues.set(key, (limit = pLimit(1)));
    return limit(run);
  }

  /**
   * One attempt on one pooled connection. The `locks` are taken before the
   * transaction begins: a serializable transaction's snapshot starts at its
   * first statement, so a lock taken inside would be waited for with a
   * snapshot older than the commits it waited for, and fail at commit.
   */
  private async once<T>(
    fn: (tx: Tx) => Promise<T>,
    locks: Set<string>,
    instance?: string,
  ): Promise<{ result: T; rev: number }> {
    const pending: Pending = { changes: new Map(), events: [] };
    const { c, done } = await this.checkout();
    let broken = false;
    let rev = 0;
    let committing = false;
    try {
      // in one order: no deadlock between two such transactions
      for (const name of [...locks].sort()) await c.query('SELECT pg_advisory_lock(hashtext($1))', [`unihost:${name}`]);
      let result: T;
      try {
        const q: Query = async (text, params) => (await c.query(named(text, params))).rows as Row[];
        if (instance === undefined) await c.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
        else {
          // one instance's own record (TxOptions.instance): its row locked, each statement on the latest commits
          await c.query('BEGIN ISOLATION LEVEL READ COMMITTED');
          await q('SELECT 1 FROM instances JOIN instance_status USING (id) WHERE id=$1 FOR NO KEY UPDATE', [instance]);
        }
        result = await fn(
          makeTx(q, pending, (name) => {
            if (!locks.has(name)) throw new NeedsLock(name);
          }),
        );
        if (pending.changes.size > 0) {
          committing = true; // flush takes COMMIT_LOCK
          rev = await this.flush(q, pending);
        }
        await c.query('COMMIT');
      } catch (e) {
        await c.query('ROLLBACK').catch(() => undefined);
        throw e;
      }
      if (rev > 0) {
        // one round trip for the rest of COMMIT_LOCK's hold (every commit of every process waits for it):
        // published and announced in a transaction of their own, then the lock let go. If any of it fails,
        // the connection is dropped, and the lock goes with its session.
        committing = false;
        try {
          await c.query(
            `BEGIN; ${publishSql(rev)}; SELECT pg_notify('${CHANNEL}', ''); COMMIT; SELECT pg_advisory_unlock(${COMMIT_LOCK})`,
          );
        } catch (e) {
          broken = true;
          throw e;
        }
      }
      return { result, rev };
    } catch (e) {
      broken ||= isUnreachable(e) || isStalePlan(e);
      throw e;
    } finally {
      if (committing && !broken)
        await c.query('SELECT pg_advisory_unlock($1)', [COMMIT_LOCK]).catch(() => (broken = true));
      // session locks outlive the transaction: released before the connection goes back (a broken one is dropped)
      if (locks.size > 0 && !broken) await c.query('SELECT pg_advisory_unlock_all()').catch(() => (broken = true));
      done(broken);
    }
  }

  /**
   * Appends the transaction's changes and events under COMMIT_LOCK, which
   * the caller holds until commit and `publish` after it: a watcher that has
   * read revision N never finds a change below N committed later. Each
   * event's per-user number (`user_seq`, the id clients see) is given by
   * `publish`, not here: reading the user's newest number inside
   * a serializable transaction made any two transactions with events of one
   * user conflict (16 at once took 75 attempts), the conflict storm of
   * bench/hosts' bursts of boots.
   */
  private async flush(q: Query, p: Pending): Promise<number> {
    const changes = [...p.changes.values()];
    const e = p.events;
    // One statement: the lock (session-level, kept past the commit until `publish`), then the changes and
    // events numbered under it. Each INSERT reads its rows through a join with `held`, so no revision or
    // event id is drawn before the lock is: the join yields nothing until `held` has its row.
    const revs = await q(
      `WITH held AS MATERIALIZED (SELECT pg_advisory_lock($13) AS l),
       ch AS (INSERT INTO changes (rev, kind, id)
         SELECT nextval('revisions'), k, i FROM held, unnest($14::text[], $15::text[]) WITH ORDINALITY AS c(k, i, n)
         ORDER BY n RETURNING rev),
       ev AS (INSERT INTO events (id, user_seq, at, user_id, instance_id, instance_name, group_id, type, from_state,
             to_state, stop_reason, exit_code, stop_code, message)
           SELECT nextval('event_ids'), NULL, a, u, i, nm, g, ty, f, tt, sr, ec, sc, ms
             FROM held, unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
               $8::text[], $9::int[], $10::int[], $11::bigint[], $12::text[])
               WITH ORDINALITY AS ev(a, u, i, nm, g, ty, f, tt, sr, ec, sc, ms, n)
             ORDER BY n)
       SELECT rev FROM ch`,
      [
        e.map((x) => x.at),
        e.map((x) => x.user_id),
        e.map((x) => x.instance_id),
        e.map((x) => x.instance_name),
        e.map((x) => x.group_id),
        e.map((x) => x.type),
        e.map((x) => x.from_state),
        e.map((x) => x.to_state),
        e.map((x) => x.stop_reason),
        e.map((x) => x.exit_code),
        e.map((x) => x.stop_code),
        e.map((x) => x.message),
        COMMIT_LOCK,
        changes.map((c) => c.kind),
        changes.map((c) => c.id),
      ],
    );
    return Math.max(...revs.map((r) => Number(r.rev)));
  }

  private async prune(): Promise<void> {
    try {
      await this.pool.query('DELETE FROM changes WHERE rev <= (SELECT max(rev) FROM changes) - $1', [KEEP_REVISIONS]);
    } catch (e) {
      this.log('pruning the change table failed', e);
    }
  }

  leaseRenewals(o: LeaseRenewalOptions, on: (r: LeaseRenewal) => void): LeaseRenewals {
    return startLeaseRenewals(clientConfig(this.target), o, on);
  }

  async renewHostLease(id: string, epoch: number, expiresAt: string): Promise<boolean> {
    try {
      // read committed, one row: a death declaration that bumped the epoch first leaves no row to update; one that
      // read the old lease and writes the row after this conflicts at its write (serializable) and reads it again
      const r = await this.pool.query(RENEW_LEASE_SQL, [expiresAt, id, epoch]);
      return (r.rowCount ?? 0) > 0;
    } catch (e) {
      if (isUnreachable(e)) throw unavailable(this.target, e);
      throw e;
    }
  }

  async read<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    try {
      // no transaction around reads (as SQLite's read connection): each statement sees the latest commit,
      // and a read costs its queries only, not BEGIN and COMMIT besides
      return await fn(this.reader);
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
    await this.listener?.stop();
    await this.pool.end();
  }
}

/** Thrown inside an attempt that asks for a lock it does not hold: the attempt is run again with it. */
class NeedsLock extends Error {
  constructor(readonly lock: string) {
    super(`lock '${lock}' is taken before the transaction begins`);
  }
}

function unavailable(target: PgTarget, e: unknown) {
  return err('UH_UNAVAILABLE', `the database is unreachable (${target.display}): ${(e as Error).message}`);
}
