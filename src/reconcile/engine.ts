import type { Change, ChangeKind, Store } from '../store/types.js';

/**
 * The small reconcile engine every controller uses: work is serialized per
 * key (one reconcile of an object at a time, in order), errors are logged
 * and never stop the queue, and each key has at most one wake-up timer.
 */
export class KeyedQueue {
  private readonly tails = new Map<string, Promise<void>>();
  /** jobs queued by `kick` that have not started */
  private readonly waiting = new Map<string, Promise<void>>();

  constructor(private readonly onError: (key: string, e: unknown) => void = () => undefined) {}

  /** Runs `fn` after every earlier job of `key` has finished. */
  run(key: string, fn: () => Promise<void>): Promise<void> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    const next = prev.then(fn).catch((e: unknown) => this.onError(key, e));
    this.tails.set(key, next);
    void next.then(() => {
      if (this.tails.get(key) === next) this.tails.delete(key);
    });
    return next;
  }

  /**
   * Like `run`, for level-based work that only needs to happen once more:
   * merged with a job of `key` queued by `kick` that has not started yet
   * (ten changes while a reconcile runs make one more reconcile, not ten).
   */
  kick(key: string, fn: () => Promise<void>): Promise<void> {
    const waiting = this.waiting.get(key);
    if (waiting) return waiting;
    const p = this.run(key, () => {
      this.waiting.delete(key);
      return fn();
    });
    this.waiting.set(key, p);
    return p;
  }

  /** Resolves when all queued jobs have run (including jobs they queue). */
  async drain(): Promise<void> {
    while (this.tails.size > 0) await Promise.all([...this.tails.values()]);
  }
}

/**
 * Delay before retrying a failed reconcile: exponential (`baseMs` doubled
 * per consecutive failure, at most `maxMs`) with jitter (50-100% of it), so
 * a persistent failure is not retried in a tight loop and many failing keys
 * do not retry in lockstep.
 */
export function retryDelay(failures: number, o = { baseMs: 1000, maxMs: 60_000 }, rnd = Math.random): number {
  const full = Math.min(o.maxMs, o.baseMs * 2 ** Math.max(0, failures - 1));
  return Math.round(full * (0.5 + rnd() * 0.5));
}

export interface TimerApi {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(t: unknown): void;
}

const realTimers: TimerApi = {
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return t;
  },
  clearTimeout: (t) => clearTimeout(t as NodeJS.Timeout),
};

/** One pending wake-up per key; an earlier request replaces a later one. */
export class Timers {
  private readonly pending = new Map<string, { at: number; t: unknown }>();
  private readonly api: TimerApi;

  constructor(
    api: TimerApi | undefined,
    private readonly fire: (key: string) => void,
  ) {
    this.api = api ?? realTimers;
  }

  /** Wakes `key` at time `at` (ms); `now` is the caller's clock. */
  at(key: string, at: number, now: number): void {
    const cur = this.pending.get(key);
    if (cur && cur.at <= at) return;
    if (cur) this.api.clearTimeout(cur.t);
    const t = this.api.setTimeout(
      () => {
        this.pending.delete(key);
        this.fire(key);
      },
      Math.max(0, Math.min(at - now, 2 ** 31 - 1)),
    );
    this.pending.set(key, { at, t });
  }

  clear(key: string): void {
    const cur = this.pending.get(key);
    if (cur) this.api.clearTimeout(cur.t);
    this.pending.delete(key);
  }

  clearAll(): void {
    for (const k of [...this.pending.keys()]) this.clear(k);
  }
}

/**
 * Level-based reconciles per key with merged kicks and retries: a failed
 * reconcile is logged and tried again after `retryDelay` of its consecutive
 * failures (sooner if a kick comes first); a success resets the count.
 */
export class RetryingQueue {
  private readonly queue: KeyedQueue;
  private readonly failures = new Map<string, number>();
  private readonly timers: Timers;
  private stopped = false;

  constructor(
    private readonly reconcile: (key: string) => Promise<void>,
    onError: (key: string, e: unknown, failures: number, retryMs: number) => void,
    o: { timers?: TimerApi; now?: () => number; rnd?: () => number } = {},
  ) {
    const now = o.now ?? Date.now;
    this.queue = new KeyedQueue((key, e) => {
      const n = (this.failures.get(key) ?? 0) + 1;
      this.failures.set(key, n);
      const delay = retryDelay(n, undefined, o.rnd);
      onError(key, e, n, delay);
      if (!this.stopped) this.timers.at(key, now() + delay, now());
    });
    this.timers = new Timers(o.timers, (key) => void this.kick(key));
  }

  /** Reconciles `key` once more (merged with a queued one); resolves when that run ended, failed or not. */
  kick(key: string): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return this.queue.kick(key, async () => {
      await this.reconcile(key);
      this.failures.delete(key);
    });
  }

  /** Runs other work of `key` in its order (not merged); a failure is retried as a reconcile. */
  run(key: string, fn: () => Promise<void>): Promise<void> {
    return this.queue.run(key, fn);
  }

  /** Resolves when every queued reconcile has run. */
  drain(): Promise<void> {
    return this.queue.drain();
  }

  /** No more runs or retries; waits for the ones under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.timers.clearAll();
    await this.queue.drain();
  }
}

/**
 * How a controller learns of changes: every change of the `kinds` it cares
 * about on the store's change feed (committed by any process), plus a full
 * resync when the feed says changes were missed and every `resyncMs`, so a
 * lost notification or a failed kick heals by itself (level-based: a resync
 * is only more reconciles). Returns the function that stops following.
 */
export function follow(
  store: Pick<Store, 'watch'>,
  o: {
    kinds: readonly ChangeKind[];
    change: (c: Change) => void;
    resync: () => void;
    resyncMs: number;
  },
): () => void {
  const kinds = new Set(o.kinds);
  const off = store.watch('now', (e) => {
    if (e.type === 'resync') o.resync();
    else if (kinds.has(e.kind)) o.change(e);
  });
  const t = setInterval(o.resync, o.resyncMs);
  t.unref();
  return () => {
    off();
    clearInterval(t);
  };
}
