/**
 * The small reconcile engine every controller uses: work is serialized per
 * key (one reconcile of an object at a time, in order), errors are logged
 * and never stop the queue, and each key has at most one wake-up timer.
 */
export class KeyedQueue {
  private readonly tails = new Map<string, Promise<void>>();

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

  /** Resolves when all queued jobs have run (including jobs they queue). */
  async drain(): Promise<void> {
    while (this.tails.size > 0) await Promise.all([...this.tails.values()]);
  }
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
