/**
 * Every row of every table of a harness's store, as one string: what a
 * rejected request must leave alone (test/api/fuzz.test.ts). Read past the
 * store's interface on purpose, so nothing the interface hides escapes.
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { pathsFor } from '../../src/paths.js';
import { parseStoreUrl } from '../../src/store/url.js';

/** Columns the daemon rewrites by itself all the time: a host's lease, renewed every quarter lease. */
const VOLATILE: Record<string, string[]> = { hosts: ['lease_expires_at'] };

function steady(table: string, rows: unknown[]): unknown[] {
  const drop = VOLATILE[table];
  if (!drop) return rows;
  return rows.map((r) => Object.fromEntries(Object.entries(r as object).filter(([k]) => !drop.includes(k))));
}

export interface StoreDump {
  snapshot(): Promise<string>;
  close(): Promise<void>;
}

export function storeDump(dataDir: string, storeUrl: string): StoreDump {
  const target = parseStoreUrl(storeUrl, pathsFor(dataDir).db);
  if (target.kind === 'sqlite') {
    const db = new Database(target.path, { readonly: true });
    return {
      async snapshot() {
        const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as {
          name: string;
        }[];
        return JSON.stringify(
          tables.map((t) => [t.name, steady(t.name, db.prepare(`SELECT * FROM "${t.name}" ORDER BY rowid`).all())]),
        );
      },
      async close() {
        db.close();
      },
    };
  }
  const client = new pg.Client({ host: target.host, port: target.port, database: target.database, user: target.user });
  const connected = client.connect();
  return {
    async snapshot() {
      await connected;
      const tables = (
        await client.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
      ).rows;
      const out: unknown[] = [];
      for (const t of tables) {
        const name = String(t.tablename);
        out.push([name, steady(name, (await client.query(`SELECT * FROM "${name}" ORDER BY 1`)).rows)]);
      }
      return JSON.stringify(out);
    },
    async close() {
      await connected.catch(() => undefined);
      await client.end();
    },
  };
}
