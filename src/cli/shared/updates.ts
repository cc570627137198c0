import { table } from './output.js';
import { updateSpec } from './parse.js';

/** `update` for one object of a category: each change in turn, stopping at the first refused. */
export async function applyUpdates(
  send: (u: ReturnType<typeof updateSpec>) => Promise<{ name: string; message?: string }>,
  changes: string[],
): Promise<{ prop: string; message: string }[]> {
  const specs = changes.map(updateSpec); // all parsed before any is sent
  const done: { prop: string; message: string }[] = [];
  for (const u of specs) {
    const r = await send(u);
    done.push({ prop: u.prop, message: r.message ?? `${u.prop} updated` });
  }
  return done;
}

export const updatesTable = (done: { prop: string; message: string }[]): string =>
  table([['PROPERTY', 'CHANGE'], ...done.map((d) => [d.prop, d.message])]);
