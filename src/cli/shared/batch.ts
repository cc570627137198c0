import { ApiError } from '../../client/errors.js';

/**
 * Runs a batch call and splits its outcome: the entries that succeeded
 * (also those of a partial success) and the error to report afterwards.
 */
export async function settle<T>(p: Promise<T[]>): Promise<{ ok: T[]; error?: ApiError }> {
  try {
    return { ok: await p };
  } catch (e) {
    if (!(e instanceof ApiError) || e.failures.length === 0) throw e;
    return { ok: e.entries.filter((x) => x.status !== 'error') as T[], error: e };
  }
}

/** Throws the error of a settled batch after its successes were printed. */
export function rethrow(r: { error?: ApiError }): void {
  if (r.error) throw r.error;
}
