import { err, isUnihostError } from '../../errors.js';
import type { HandlerCtx, Entry, Result } from '../endpoint.js';

/**
 * Builds a `handleAll` that first runs `check` on every entry's parameters
 * and only then handles the entries one by one, so a bad entry answers 400
 * and nothing of a batch runs (docs/errors.md). Unlike the
 * endpoint's own `check`, this one sees the daemon (its configuration, e.g.
 * the metro domain) and what earlier entries of the request claimed (e.g.
 * the same domain in two entries).
 */
export function checkedEach<P>(
  check: (params: P, ctx: HandlerCtx, seen: Set<string>) => void,
  handle: (ctx: HandlerCtx, e: Entry<P>) => Promise<Result>,
): (ctx: HandlerCtx, entries: Entry<P>[]) => Promise<Result[]> {
  return async (ctx, entries) => {
    // Shared across entries so a check can refuse what two entries of one request both claim.
    const seen = new Set<string>();
    entries.forEach((e, i) => {
      try {
        check(e.params, ctx, seen);
      } catch (x) {
        if (entries.length > 1 && isUnihostError(x)) throw err(x.code, `entry ${i}: ${x.message}`);
        throw x;
      }
    });
    return ctx.each(entries as Entry<unknown>[], (e) => handle(ctx, e as Entry<P>));
  };
}

/** `details=false` (newer clients) answers uuid and name only, for objects without a state. */
export function summaryOr(q: Record<string, unknown>, full: Result): Result {
  return q.details === false ? { uuid: full.uuid, name: full.name } : full;
}
