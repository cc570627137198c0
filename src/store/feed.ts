import type { ChangeKind, FeedEvent } from './types.js';

/** One row of a store's change table. */
export interface FeedRow {
  rev: number;
  kind: ChangeKind;
  id: string;
}

/**
 * Where a feed reads committed changes: the store's change table. SQLite
 * answers synchronously (so local commits reach watchers in the commit's
 * tick), PostgreSQL with a promise.
 */
export interface FeedSource {
  /** rows with `rev > after`, ascending, at most `limit` */
  since(after: number, limit: number): FeedRow[] | Promise<FeedRow[]>;
  /** the smallest revision still kept, 0 when the table is empty */
  oldest(): number | Promise<number>;
}

const PAGE = 1000;

interface Watcher {
  fn: (e: FeedEvent) => void;
  /** last revision delivered */
  pos: number;
  /** catching up on older revisions: live dispatch skips it until it has */
  behind: boolean;
}

const isPromise = <T>(v: T | Promise<T>): v is Promise<T> => typeof (v as Promise<T>)?.then === 'function';

/**
 * The change feed of one store in one process: reads what was committed
 * after the newest revision it has seen and hands each change to every
 * watcher once, in commit order. `poke()` asks it to read (after a local
 * commit, a notification, a poll tick); reads never overlap, and pokes that
 * arrive during a read make one more read. A watcher that starts before the
 * oldest revision kept gets `resync` first.
 */
export class Feed {
  private head = 0;
  private readonly watchers = new Set<Watcher>();
  private reading = false;
  private again = false;
  /** callers of `reach` waiting for the head to pass their revision */
  private readonly reachers: { rev: number; done: () => void }[] = [];

  constructor(
    private readonly src: FeedSource,
    private readonly onError: (e: unknown) => void,
  ) {}

  /** Starts at the newest revision (changes before the process opened the store are not replayed). */
  start(head: number): void {
    this.head = head;
  }

  revision(): number {
    return this.head;
  }

  watch(from: number | 'now', fn: (e: FeedEvent) => void): () => void {
    const w: Watcher = { fn, pos: from === 'now' ? this.head : from, behind: false };
    this.watchers.add(w);
    if (w.pos < this.head) {
      w.behind = true;
      this.then(this.catchUp(w), () => undefined);
    }
    return () => void this.watchers.delete(w);
  }

  /**
   * Resolves once every watcher has been handed the changes up to `rev` (a
   * commit of this process): `tx` resolves after them, so whoever commits
   * and then reads a cache a watcher keeps (tokens, waits) sees its change.
   * Also resolves when reading the feed fails (the commit stands).
   */
  reach(rev: number): Promise<void> {
    if (this.head >= rev) return Promise.resolve();
    return new Promise((done) => {
      this.reachers.push({ rev, done });
      this.poke();
    });
  }

  private settleReachers(all = false): void {
    for (let i = this.reachers.length - 1; i >= 0; i--) {
      const r = this.reachers[i]!;
      if (all || r.rev <= this.head) {
        this.reachers.splice(i, 1);
        r.done();
      }
    }
  }

  /** Reads what is new; synchronous when the source is. */
  poke(): void {
    if (this.reading) {
      this.again = true;
      return;
    }
    this.reading = true;
    this.then(this.readLoop(), () => (this.reading = false));
  }

  /** Runs `v`'s continuation now when it is a value, later when it is a promise. */
  private then<T>(v: T | Promise<T>, done: (x: T) => void): void {
    if (isPromise(v))
      v.then(done, (e: unknown) => {
        this.reading = false;
        this.settleReachers(true);
        this.onError(e);
      });
    else done(v);
  }

  private readLoop(): void | Promise<void> {
    for (;;) {
      this.again = false;
      const rows = this.src.since(this.head, PAGE);
      if (isPromise(rows)) return rows.then((r) => this.afterRead(r));
      if (!this.afterReadSync(rows)) return;
    }
  }

  private async afterRead(rows: FeedRow[]): Promise<void> {
    let more = this.afterReadSync(rows);
    while (more) {
      this.again = false;
      more = this.afterReadSync(await this.src.since(this.head, PAGE));
    }
  }

  /** Delivers `rows`; true when another read is due. */
  private afterReadSync(rows: FeedRow[]): boolean {
    for (const r of rows) {
      if (r.rev <= this.head) continue;
      this.head = r.rev;
      const e: FeedEvent = { type: 'change', rev: r.rev, kind: r.kind, id: r.id };
      for (const w of this.watchers) {
        if (w.behind || w.pos >= r.rev) continue;
        w.pos = r.rev;
        this.deliver(w, e);
      }
    }
    if (this.reachers.length > 0) this.settleReachers();
    return rows.length === PAGE || this.again;
  }

  private deliver(w: Watcher, e: FeedEvent): void {
    try {
      w.fn(e);
    } catch (err) {
      this.onError(err);
    }
  }

  /** Delivers what a late watcher missed, page by page, until it is at the head. */
  private catchUp(w: Watcher): void | Promise<void> {
    const oldest = this.src.oldest();
    const go = (o: number): void | Promise<void> => {
      if (o > 0 && w.pos < o - 1) {
        w.pos = this.head;
        w.behind = false;
        this.deliver(w, { type: 'resync', rev: this.head });
        return;
      }
      return this.catchUpFrom(w);
    };
    return isPromise(oldest) ? oldest.then(go) : go(oldest);
  }

  private catchUpFrom(w: Watcher): void | Promise<void> {
    for (;;) {
      if (w.pos >= this.head) {
        w.behind = false;
        return;
      }
      // Everything up to the head was committed before this read starts: a short page means none is left below it.
      const upTo = this.head;
      const rows = this.src.since(w.pos, PAGE);
      if (isPromise(rows))
        return rows.then((r) => {
          this.deliverBacklog(w, r, upTo);
          return this.catchUpFrom(w);
        });
      this.deliverBacklog(w, rows, upTo);
    }
  }

  private deliverBacklog(w: Watcher, rows: FeedRow[], upTo: number): void {
    const before = w.pos;
    for (const r of rows) {
      if (r.rev <= w.pos || r.rev > upTo) continue;
      w.pos = r.rev;
      this.deliver(w, { type: 'change', rev: r.rev, kind: r.kind, id: r.id });
    }
    if (rows.length < PAGE || w.pos === before) w.pos = Math.max(w.pos, upTo);
  }
}
