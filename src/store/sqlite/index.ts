import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import pLimit from 'p-limit';
import { Feed, type FeedRow } from '../feed.js';
import type { FeedEvent, InstanceRec, Store, Tx, TxOptions } from '../types.js';
import { MIGRATIONS } from './migrations.js';
import { makeTx, RowCache, type Pending } from './tx.js';
import { WalSync } from './wal-sync.js';

/** How often the feed looks for commits of other processes (the admin commands, a second daemon). */
const POLL_MS = 100;
/** Revisions kept in the change table; older ones are pruned (a watcher that far behind resyncs). */
const KEEP_REVISIONS = 10_000;

/** A SQLite database: one write connection serialized by a mutex, one read connection. */
export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const;
  private readonly w: Database.Database;
  private readonly r: Database.Database;
  /** changes and events of the transaction in progress; null outside a transaction */
  private readonly pending: { cur: Pending | null } = { cur: null };
  private readonly wtx: Tx;
  /** committed instance rows by id, for the read path; cleared when another process commits */
  private readonly cache = new RowCache<InstanceRec>(20_000);
  private readonly rtx: Tx;
  /** write transactions run one at a time */
  private readonly serial = pLimit(1);
  private readonly dataVersion: Database.Statement;
  /** the WAL's fsync for commits that must survive a power loss (none for an in-memory database) */
  private readonly walSync: WalSync | null;
  /** a transaction's events and changes (flush), prepared once */
  private readonly insertEvent: Database.Statement;
  private readonly insertChange: Database.Statement;
  private readonly feed: Feed;
  private lastDataVersion: number;
  private readonly poll: NodeJS.Timeout;
  private commits = 0;

  constructor(path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.w = new Database(path);
    this.w.pragma('journal_mode = WAL');
    // COMMIT does not fsync; a durable transaction waits for the WAL's fsync off the event loop (wal-sync.ts)
    this.w.pragma('synchronous = NORMAL');
    this.w.pragma('foreign_keys = ON');
    this.w.pragma('busy_timeout = 5000');
    this.migrate();
    this.r = path === ':memory:' ? this.w : new Database(path, { readonly: true });
    this.r.pragma('busy_timeout = 5000');
    // Built once per connection: a Tx is a bundle of closures over prepared statements.
    this.wtx = makeTx(this.w, this.pending, null);
    this.rtx = this.r === this.w ? this.wtx : makeTx(this.r, { cur: null }, this.cache);
    this.dataVersion = this.w.prepare('PRAGMA data_version').pluck();
    this.walSync = path === ':memory:' ? null : new WalSync(`${path}-wal`);
    this.insertEvent = this.w.prepare(
      `INSERT INTO events (user_seq, at, user_id, instance_id, instance_name, group_id, type, from_state, to_state,
           stop_reason, exit_code, stop_code, message)
         VALUES ((SELECT coalesce(max(user_seq), 0) + 1 FROM events WHERE user_id=@user_id),
           @at, @user_id, @instance_id, @instance_name, @group_id, @type, @from_state, @to_state,
           @stop_reason, @exit_code, @stop_code, @message)`,
    );
    this.insertChange = this.w.prepare('INSERT INTO changes (kind, id) VALUES (?, ?)');
    this.lastDataVersion = this.dataVersion.get() as number;
    const since = this.r.prepare('SELECT rev, kind, id FROM changes WHERE rev > ? ORDER BY rev LIMIT ?');
    const oldest = this.r.prepare('SELECT coalesce(min(rev), 0) FROM changes').pluck();
    this.feed = new Feed(
      { since: (after, limit) => since.all(after, limit) as FeedRow[], oldest: () => oldest.get() as number },
      () => undefined,
    );
    this.feed.start(this.w.prepare('SELECT coalesce(max(rev), 0) FROM changes').pluck().get() as number);
    this.poll = setInterval(() => this.checkExternal(), POLL_MS);
    this.poll.unref();
  }

  /** Migrations run under an exclusive lock, so two processes opening a new data dir never both apply one. */
  private migrate(): void {
    for (;;) {
      this.w.exec('BEGIN EXCLUSIVE');
      try {
        const v = this.w.pragma('user_version', { simple: true }) as number;
        if (v >= MIGRATIONS.length) {
          this.w.exec('COMMIT');
          return;
        }
        this.w.exec(MIGRATIONS[v]!);
        this.w.pragma(`user_version = ${v + 1}`);
        this.w.exec('COMMIT');
      } catch (e) {
        if (this.w.inTransaction) this.w.exec('ROLLBACK');
        throw e;
      }
    }
  }

  async tx<T>(fn: (tx: Tx) => Promise<T>, o: TxOptions = {}): Promise<T> {
    // (locks: one writer at a time already)
    const run = async (): Promise<T> => {
      const cur: Pending = { changes: new Map(), events: [] };
      this.pending.cur = cur;
      this.w.exec('BEGIN IMMEDIATE');
      let result: T;
      try {
        result = await fn(this.wtx);
        this.flush(cur);
        this.w.exec('COMMIT');
        // Same tick as the commit: no read can see the new rows before stale cache entries go.
        for (const c of cur.changes.values()) if (c.kind === 'instance') this.cache.delete(c.id);
      } catch (e) {
        if (this.w.inTransaction) this.w.exec('ROLLBACK');
        throw e;
      } finally {
        this.pending.cur = null;
      }
      // Watchers hear of the commit at once (a boot starts while the WAL is synced); the caller is
      // answered once it is on disk, unless it is a VM's runtime state (TxOptions.runtime): the next
      // durable commit's sync writes that out with its own.
      if (cur.changes.size > 0) this.feed.poke();
      if (++this.commits % 1000 === 0) this.prune();
      return result;
    };
    const result = await this.serial(run);
    if (!o.runtime && this.walSync) await this.walSync.sync();
    return result;
  }

  /** Appends the transaction's events and changes (their revisions follow commit order: writes are serial). */
  private flush(cur: Pending): void {
    for (const e of cur.events) this.insertEvent.run(e);
    for (const c of cur.changes.values()) this.insertChange.run(c.kind, c.id);
  }

  private prune(): void {
    void this.serial(() =>
      this.w.prepare('DELETE FROM changes WHERE rev <= (SELECT max(rev) FROM changes) - ?').run(KEEP_REVISIONS),
    ).catch(() => undefined);
  }

  /** Another process committed: drop cached rows and read its changes. */
  private checkExternal(): void {
    if (this.pending.cur) return; // the commit of the transaction under way reads them
    const v = this.dataVersion.get() as number;
    if (v === this.lastDataVersion) return;
    this.lastDataVersion = v;
    this.cache.clear();
    this.feed.poke();
  }

  read<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    this.checkExternal();
    return fn(this.rtx);
  }

  renewHostLease(id: string, epoch: number, expiresAt: string): Promise<boolean> {
    // transactions here are serial and never conflict
    return this.tx((tx) => tx.hosts.renew(id, epoch, expiresAt));
  }

  externalVersion(): number {
    this.checkExternal();
    return this.lastDataVersion;
  }

  watch(from: number | 'now', listener: (e: FeedEvent) => void): () => void {
    return this.feed.watch(from, listener);
  }

  revision(): number {
    return this.feed.revision();
  }

  async close(): Promise<void> {
    clearInterval(this.poll);
    await this.serial(() => undefined); // after the transactions under way
    await this.walSync?.close();
    if (this.r !== this.w) this.r.close();
    this.w.close();
  }
}
