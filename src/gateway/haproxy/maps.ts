import { writeFile } from 'node:fs/promises';
import { renderMap, type PlaneFiles } from './config.js';
import type { RuntimeApi } from './runtime.js';
import { cmd } from './servers.js';

/** public port -> host name -> backend: the Host/SNI maps HAProxy routes with */
export type MapTable = Map<number, Map<string, string>>;

/**
 * Brings HAProxy's maps from `have` (updated in place) towards `want` in one
 * of two phases: `remove` takes names that leave a port away (`del map`);
 * `add` adds and moves names (`add map` / `set map`) and rewrites each
 * port's file for the next start. Names leave before their backend's
 * servers go and come after its servers are there (plane.ts).
 */
export async function applyMaps(
  admin: RuntimeApi,
  f: PlaneFiles,
  have: MapTable,
  want: MapTable,
  phase: 'remove' | 'add',
): Promise<void> {
  for (const [p, m] of want) {
    const cur = have.get(p) ?? new Map<string, string>();
    have.set(p, cur);
    const file = f.map(p);
    if (phase === 'remove') {
      for (const k of [...cur.keys()])
        if (!m.has(k)) {
          await cmd(admin, `del map ${file} ${k}`);
          cur.delete(k);
        }
      continue;
    }
    for (const [k, v] of m) {
      if (cur.get(k) === v) continue;
      await cmd(admin, `${cur.has(k) ? 'set' : 'add'} map ${file} ${k} ${v}`);
      cur.set(k, v);
    }
    await writeFile(file, renderMap(m));
  }
}
