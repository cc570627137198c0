import type { ChangeKind, Store } from '../store/types.js';

/**
 * Waits until `check()` returns a value (not undefined), re-checking after
 * every committed change of `kind` for `id`. Resolves undefined on timeout or
 * abort. Never polls: it rides on the store's change notifications.
 */
export function waitForChange<T>(
  store: Store,
  kind: ChangeKind,
  id: string,
  check: () => Promise<T | undefined>,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<T | undefined> {
  return new Promise((resolve, reject) => {
    let done = false;
    let checking = false;
    let again = false;
    const finish = (v: T | undefined): void => {
      if (done) return;
      done = true;
      unsubscribe();
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve(v);
    };
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
        done = true;
        unsubscribe();
        clearTimeout(timer);
        reject(e);
      } finally {
        checking = false;
      }
    };
    const unsubscribe = store.onChange((c) => {
      if (c.kind === kind && c.id === id && !done) void run();
    });
    const onAbort = (): void => finish(undefined);
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => finish(undefined), Math.min(timeoutMs, 2 ** 31 - 1));
    void run();
  });
}
