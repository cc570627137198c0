import { err } from '../errors.js';
import type { ChangeKind, Store } from '../store/types.js';

interface Waiter {
  /** re-runs the waiter's check (a change of its object) */
  poke(): void;
  /** ends the wait with undefined (abort of its request) */
  cancel(): void;
}

/**
 * All waits of a process share one store listener that dispatches each
 * change to the waiters of that object only, and all waits of one request
 * share one abort listener on its signal: a request waiting on N targets
 * adds N map entries, not N listeners that every change of every user
 * would run. Each user may have at most `maxPerOwner` waits at a time.
 */
export class WaitHub {
  private readonly byKey = new Map<string, Set<Waiter>>();
  private readonly bySignal = new WeakMap<AbortSignal, Set<Waiter>>();
  private readonly perOwner = new Map<string, number>();

  constructor(
    private readonly store: Store,
    private readonly maxPerOwner: number,
  ) {
    // Changes of any process reach waits through the feed; after a resync every wait checks again.
    store.watch('now', (e) => {
      const sets = e.type === 'resync' ? [...this.byKey.values()] : [this.byKey.get(`${e.kind}:${e.id}`)];
      for (const set of sets) if (set) for (const w of [...set]) w.poke();
    });
  }

  /**
   * Reserves `n` waits for `owner` (a user id) before anything changes, so
   * a request is refused whole instead of half-done; throws UH_TOO_MANY
   * when the user already waits on too many objects.
   */
  reserve(owner: string, n: number): WaitLease {
    const used = this.perOwner.get(owner) ?? 0;
    if (used + n > this.maxPerOwner) {
      throw err(
        'UH_TOO_MANY',
        `too many concurrent waits: ${used} waiting + ${n} requested > ${this.maxPerOwner} allowed per user`,
      );
    }
    this.perOwner.set(owner, used + n);
    return new WaitLease(this, owner, n);
  }

  /** @internal returns `n` reserved waits of `owner` */
  release(owner: string, n: number): void {
    const left = (this.perOwner.get(owner) ?? 0) - n;
    if (left > 0) this.perOwner.set(owner, left);
    else this.perOwner.delete(owner);
  }

  /** Waits currently reserved by `owner` (tests, metrics). */
  reserved(owner: string): number {
    return this.perOwner.get(owner) ?? 0;
  }

  /** @internal */
  add(key: string, w: Waiter, signal: AbortSignal | undefined): void {
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    set.add(w);
    if (!signal) return;
    let ws = this.bySignal.get(signal);
    if (!ws) {
      const group = (ws = new Set());
      this.bySignal.set(signal, group);
      signal.addEventListener('abort', () => [...group].forEach((x) => x.cancel()), { once: true });
    }
    ws.add(w);
  }

  /** @internal */
  remove(key: string, w: Waiter, signal: AbortSignal | undefined): void {
    const set = this.byKey.get(key);
    if (set?.delete(w) && set.size === 0) this.byKey.delete(key);
    if (signal) this.bySignal.get(signal)?.delete(w);
  }

  /** Objects with at least one waiter (tests, metrics). */
  get watched(): number {
    return this.byKey.size;
  }
}

/** Waits reserved for one request; each `wait` uses one, `release` returns those left. */
export class WaitLease {
  private left: number;

  constructor(
    private readonly hub: WaitHub,
    private readonly owner: string,
    n: number,
  ) {
    this.left = n;
  }

  /**
   * Waits until `check()` returns a value (not undefined), re-checking after
   * every committed change of `kind` for `id`. Resolves undefined on timeout
   * or abort. Never polls: it rides on the store's change notifications.
   */
  wait<T>(
    kind: ChangeKind,
    id: string,
    check: () => Promise<T | undefined>,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<T | undefined> {
    if (this.left <= 0) throw err('UH_INTERNAL', 'wait lease exhausted');
    this.left--;
    if (signal?.aborted) {
      this.hub.release(this.owner, 1);
      return Promise.resolve(undefined);
    }
    const key = `${kind}:${id}`;
    return new Promise<T | undefined>((resolve, reject) => {
      let done = false;
      let checking = false;
      let again = false;
      const end = (): boolean => {
        if (done) return false;
        done = true;
        this.hub.remove(key, w, signal);
        clearTimeout(timer);
        this.hub.release(this.owner, 1);
        return true;
      };
      const finish = (v: T | undefined): void => void (end() && resolve(v));
      const run = async (): Promise<void> => {
        if (checking) {
          again = true;
          return;
        }
        checking = true;
        try {
          do {
            again = false;
            const v = await check();
            if (v !== undefined) return finish(v);
          } while (again && !done);
        } catch (e) {
          if (end()) reject(e);
        } finally {
          checking = false;
        }
      };
      const w: Waiter = { poke: () => void (!done && run()), cancel: () => finish(undefined) };
      this.hub.add(key, w, signal);
      const timer = setTimeout(() => finish(undefined), Math.min(timeoutMs, 2 ** 31 - 1));
      void run();
    });
  }

  /** Returns the waits not used (always call it, in a finally). */
  release(): void {
    if (this.left > 0) this.hub.release(this.owner, this.left);
    this.left = 0;
  }
}
