import { SqliteStore } from './sqlite/index.js';
import type { Store } from './types.js';
import { parseStoreUrl } from './url.js';

/**
 * Opens the store the setting names (src/store/url.ts): SQLite at
 * `sqlitePath` when it is empty, else PostgreSQL. Every command that opens
 * the store (the daemon, `admin user ...`, `image import ...`) comes here,
 * so all honour the same setting. Throws with the reason: a refused URL, an
 * unreachable server (named without its password).
 */
export async function openStore(
  url: string,
  sqlitePath: string,
  log?: (msg: string, e?: unknown) => void,
): Promise<Store> {
  const target = parseStoreUrl(url, sqlitePath);
  if (target.kind === 'sqlite') return new SqliteStore(target.path);
  // loaded only when used: the embedded default never loads the PostgreSQL client
  const { PostgresStore } = await import('./postgres/index.js');
  return PostgresStore.open(target, log);
}
