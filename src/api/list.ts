import { err, isUnihostError } from '../errors.js';
import type { HandlerCtx, EndpointDef, Entry, Result } from './endpoint.js';

/**
 * Runs a GET of an endpoint with `list`: without a target it lists every
 * object (newer clients page with `count` and `from`, the last UUID of the
 * previous page); with targets it gets each. Either way `handle` builds each
 * entry, so a listed object looks like a got one.
 */
export async function listOrGet(
  def: EndpointDef,
  ctx: HandlerCtx,
  entries: Entry<Record<string, unknown>>[],
  q: Record<string, unknown>,
): Promise<Result[]> {
  const handle = def.handle!;
  if (entries.length === 1 && !entries[0]!.target) {
    const page = pageOf(await def.list!(ctx), q.from as string | undefined, q.count as number | undefined);
    const params = entries[0]!.params;
    const out: Result[] = [];
    // Listed entries carry no `status` (like /list entries); one deleted since the page was cut is left out.
    for (const o of page) {
      const e: Entry<Record<string, unknown>> = { target: { uuid: o.uuid }, params, local: false, listed: true };
      try {
        out.push(await handle(ctx, e, q));
      } catch (x) {
        if (!isUnihostError(x) || x.code !== 'UH_NOT_FOUND') out.push(ctx.entryError(e, x));
      }
    }
    return out;
  }
  entries.forEach((e, i) => {
    if (!e.target) throw err('UH_MISSING_ID', `entry ${i}: 'uuid' or 'name' is required`);
  });
  if (q.count !== undefined || q.from !== undefined) {
    throw err('UH_INVALID', "query parameters 'count' and 'from' page a list: they cannot go with 'uuid' or 'name'");
  }
  return ctx.each(entries, (e) => handle(ctx, e as Entry<Record<string, unknown>>, q), def.concurrent);
}

/** The objects after `from` (exclusive), at most `count` of them. */
function pageOf<T extends { uuid: string }>(all: T[], from: string | undefined, count: number | undefined): T[] {
  let start = 0;
  if (from !== undefined) {
    start = all.findIndex((o) => o.uuid === from.toLowerCase()) + 1;
    if (start === 0) throw err('UH_INVALID', `query parameter 'from': no object with UUID '${from}' in this list`);
  }
  return all.slice(start, count !== undefined ? start + count : undefined);
}
