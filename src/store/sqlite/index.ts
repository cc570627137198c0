import Database from 'better-sqlite3';
import { EventEmitter } from 'node:events';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { err } from '../../errors.js';
import type {
  AutoscaleRec,
  Change,
  ChangeKind,
  DomainRec,
  EventRec,
  ImageRec,
  InstanceRec,
  InstanceState,
  Store,
  TagRec,
  TokenRec,
  Tx,
  Used,
  UserRec,
  UserTable,
} from '../types.js';
import { MIGRATIONS } from './migrations.js';
import pLimit from 'p-limit';

type Row = Record<string, unknown>;

/** How one table maps records to rows: JSON-encoded and boolean columns. */
interface TableSpec {
  table: string;
  key: string;
  kind: ChangeKind;
  json: readonly string[];
  bool: readonly string[];
}

const SPECS = {
  users: { table: 'users', key: 'id', kind: 'user', json: ['quotas'], bool: ['developer'] },
  tokens: { table: 'tokens', key: 'id', kind: 'user', json: [], bool: [] },
  instances: {
    table: 'instances',
    key: 'id',
    kind: 'instance',
    json: ['args', 'env', 'features', 'stop_request', 'runtime'],
    bool: [],
  },
  groups: { table: 'service_groups', key: 'id', kind: 'group', json: ['services'], bool: ['persistent'] },
  domains: { table: 'domains', key: 'fqdn', kind: 'group', json: [], bool: [] },
  volumes: { table: 'volumes', key: 'id', kind: 'volume', json: [], bool: ['persistent', 'readonly'] },
  certificates: { table: 'certificates', key: 'id', kind: 'certificate', json: ['names'], bool: [] },
  autoscale: { table: 'autoscale', key: 'group_id', kind: 'autoscale', json: ['policies'], bool: ['enabled'] },
  images: { table: 'images', key: 'digest', kind: 'image', json: [], bool: ['initrd'] },
  tags: { table: 'tags', key: 'ref', kind: 'image', json: [], bool: [] },
} as const satisfies Record<string, TableSpec>;

function fromRow<T>(spec: TableSpec, row: Row | undefined): T | undefined {
  if (!row) return undefined;
  for (const c of spec.json) row[c] = row[c] == null ? null : JSON.parse(row[c] as string);
  for (const c of spec.bool) row[c] = row[c] === 1;
  return row as T;
}

function toRow(spec: TableSpec, rec: object): Row {
  const row: Row = { ...rec };
  for (const c of spec.json) if (c in row) row[c] = row[c] == null ? null : JSON.stringify(row[c]);
  for (const c of spec.bool) if (c in row) row[c] = row[c] ? 1 : 0;
  return row;
}

/** Column names are fixed by the schema; refuse anything else before it reaches SQL text. */
const IDENT = /^[a-z_][a-z0-9_]*$/;
function cols(obj: object): string[] {
  const keys = Object.keys(obj);
  for (const k of keys) if (!IDENT.test(k)) throw err('UH_INTERNAL', `bad column name ${k}`);
  return keys;
}

/** A SQLite database: one write connection serialized by a mutex, one read connection. */
export class SqliteStore implements Store {
  private readonly w: Database.Database;
  private readonly r: Database.Database;
  private readonly events = new EventEmitter();
  /** changes of the transaction in progress; null outside a transaction */
  private readonly pending: { changes: Change[] | null } = { changes: null };
  private readonly wtx: Tx;
  /** committed instance rows by id, for the read path (only this process writes instances) */
  private readonly cache = new RowCache<InstanceRec>(20_000);
  private readonly rtx: Tx;
  /** write transactions run one at a time */
  private readonly serial = pLimit(1);
  private readonly dataVersion: Database.Statement;

  constructor(path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.w = new Database(path);
    this.w.pragma('journal_mode = WAL');
    this.w.pragma('synchronous = FULL');
    this.w.pragma('foreign_keys = ON');
    this.w.pragma('busy_timeout = 5000');
    this.migrate();
    this.r = path === ':memory:' ? this.w : new Database(path, { readonly: true });
    this.r.pragma('busy_timeout = 5000');
    this.events.setMaxListeners(0);
    // Built once per connection: a Tx is a bundle of closures over prepared statements.
    this.wtx = makeTx(this.w, this.pending, null);
    this.rtx = this.r === this.w ? this.wtx : makeTx(this.r, { changes: null }, this.cache);
    this.dataVersion = this.w.prepare('PRAGMA data_version').pluck();
  }

  private migrate(): void {
    const current = this.w.pragma('user_version', { simple: true }) as number;
    for (let v = current; v < MIGRATIONS.length; v++) {
      this.w.transaction(() => {
        this.w.exec(MIGRATIONS[v]!);
        this.w.pragma(`user_version = ${v + 1}`);
      })();
    }
  }

  tx<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      const changes: Change[] = [];
      this.pending.changes = changes;
      this.w.exec('BEGIN IMMEDIATE');
      let result: T;
      try {
        result = await fn(this.wtx);
        this.w.exec('COMMIT');
        // Same tick as the commit: no read can see the new rows before stale cache entries go.
        for (const c of changes) if (c.kind === 'instance') this.cache.delete(c.id);
      } catch (e) {
        if (this.w.inTransaction) this.w.exec('ROLLBACK');
        throw e;
      } finally {
        this.pending.changes = null;
      }
      for (const c of changes) this.events.emit('change', c);
      return result;
    };
    return this.serial(run);
  }

  read<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return fn(this.rtx);
  }

  externalVersion(): number {
    // data_version of the write connection moves only on commits of other connections (r is read-only).
    return this.dataVersion.get() as number;
  }

  onChange(listener: (c: Change) => void): () => void {
    this.events.on('change', listener);
    return () => this.events.off('change', listener);
  }

  async close(): Promise<void> {
    await this.serial(() => undefined); // after the transactions under way
    if (this.r !== this.w) this.r.close();
    this.w.close();
  }
}

/** A bounded map of frozen records; cleared when full (simple, and misses are cheap). */
class RowCache<T extends object> {
  private readonly m = new Map<string, T>();
  constructor(private readonly max: number) {}
  get(id: string): T | undefined {
    return this.m.get(id);
  }
  set(id: string, rec: T): T {
    if (this.m.size >= this.max) this.m.clear();
    for (const v of Object.values(rec)) if (v && typeof v === 'object') Object.freeze(v);
    this.m.set(id, Object.freeze(rec));
    return rec;
  }
  delete(id: string): void {
    this.m.delete(id);
  }
}

function makeTx(db: Database.Database, pending: { changes: Change[] | null }, cache: RowCache<InstanceRec> | null): Tx {
  const statements = new Map<string, Database.Statement>();
  const prep = (sql: string): Database.Statement => {
    let s = statements.get(sql);
    if (!s) {
      s = db.prepare(sql);
      statements.set(sql, s);
    }
    return s;
  };
  const write = (spec: TableSpec, id: string): void => {
    if (!pending.changes) throw err('UH_INTERNAL', 'write outside a transaction');
    pending.changes.push({ kind: spec.kind, id });
  };
  const one = <T>(spec: TableSpec, sql: string, ...p: unknown[]): T | undefined =>
    fromRow<T>(spec, prep(sql).get(...p) as Row | undefined);
  const many = <T>(spec: TableSpec, sql: string, ...p: unknown[]): T[] =>
    (prep(sql).all(...p) as Row[]).map((r) => fromRow<T>(spec, r)!);
  const insert = async (spec: TableSpec, rec: object): Promise<void> => {
    const row = toRow(spec, rec);
    const c = cols(row);
    prep(`INSERT INTO ${spec.table} (${c.join(',')}) VALUES (${c.map((k) => '@' + k).join(',')})`).run(row);
    write(spec, String(row[spec.key]));
  };
  const update = async (spec: TableSpec, id: string, patch: object): Promise<void> => {
    const row = toRow(spec, patch);
    delete row[spec.key];
    const c = cols(row);
    if (c.length === 0) return;
    prep(`UPDATE ${spec.table} SET ${c.map((k) => `${k}=@${k}`).join(',')} WHERE ${spec.key}=@__key`).run({
      ...row,
      __key: id,
    });
    write(spec, id);
  };
  const del = async (spec: TableSpec, id: string): Promise<void> => {
    prep(`DELETE FROM ${spec.table} WHERE ${spec.key}=?`).run(id);
    write(spec, id);
  };
  /** Read path: rows by id through the cache; names resolve to ids with a covering index lookup. */
  const instanceById = (id: string): InstanceRec | undefined => {
    const hit = cache?.get(id);
    if (hit) return hit;
    const rec = one<InstanceRec>(SPECS.instances, 'SELECT * FROM instances WHERE id=?', id);
    return rec && cache ? cache.set(id, rec) : rec;
  };
  const cachedInstances = (c: RowCache<InstanceRec>) => ({
    get: async (userId: string, id: string) => {
      const rec = instanceById(id);
      return rec?.user_id === userId ? rec : undefined;
    },
    getByName: async (userId: string, name: string) => {
      const row = prep('SELECT id FROM instances WHERE user_id=? AND name=?').get(userId, name) as
        { id: string } | undefined;
      return row ? (c.get(row.id) ?? instanceById(row.id)) : undefined;
    },
  });
  const userTable = <T extends { id: string; user_id: string; name: string }>(spec: TableSpec): UserTable<T> => ({
    get: async (userId, id) => one<T>(spec, `SELECT * FROM ${spec.table} WHERE id=? AND user_id=?`, id, userId),
    getByName: async (userId, name) =>
      one<T>(spec, `SELECT * FROM ${spec.table} WHERE user_id=? AND name=?`, userId, name),
    list: async (userId, where = {}) => {
      const row = toRow(spec, where);
      const c = cols(row);
      const cond = c.map((k) => (row[k] === null ? ` AND ${k} IS NULL` : ` AND ${k}=@${k}`)).join('');
      const params = Object.fromEntries(c.filter((k) => row[k] !== null).map((k) => [k, row[k]]));
      return many<T>(spec, `SELECT * FROM ${spec.table} WHERE user_id=@__u${cond} ORDER BY rowid`, {
        ...params,
        __u: userId,
      });
    },
    insert: (rec) => insert(spec, rec),
    update: (id, patch) => update(spec, id, patch),
    delete: (id) => del(spec, id),
  });

  const S = SPECS;
  return {
    users: {
      get: async (id) => one<UserRec>(S.users, 'SELECT * FROM users WHERE id=?', id),
      getByName: async (name) => one<UserRec>(S.users, 'SELECT * FROM users WHERE name=?', name),
      insert: (rec) => insert(S.users, rec),
      update: (id, patch) => update(S.users, id, patch),
      list: async () => many<UserRec>(S.users, 'SELECT * FROM users ORDER BY rowid'),
    },
    tokens: {
      listForUser: async (userId) => many<TokenRec>(S.tokens, 'SELECT * FROM tokens WHERE user_id=?', userId),
      insert: (rec) => insert(S.tokens, rec),
      delete: (id) => del(S.tokens, id),
    },
    events: {
      after: async (userId, after, f, limit) =>
        prep(
          `SELECT * FROM events WHERE user_id=@u AND id>@after AND (@i IS NULL OR instance_id=@i)
             AND (@n IS NULL OR instance_name=@n) AND (@g IS NULL OR group_id=@g) ORDER BY id LIMIT @limit`,
        ).all({
          u: userId,
          after,
          i: f.instanceId ?? null,
          n: f.instanceName ?? null,
          g: f.groupId ?? null,
          limit,
        }) as EventRec[],
      lastId: async () => (prep('SELECT coalesce(max(id), 0) AS id FROM events').get() as { id: number }).id,
    },
    instances: {
      ...userTable<InstanceRec>(S.instances),
      ...(cache ? cachedInstances(cache) : {}),
      getAny: async (id) => instanceById(id),
      all: async () => many<InstanceRec>(S.instances, 'SELECT * FROM instances ORDER BY rowid'),
      listJson: async (userId, state?: InstanceState) =>
        (
          prep(
            `SELECT coalesce(json_group_array(json_object('uuid', id, 'name', name)), '[]') AS j FROM
               (SELECT id, name FROM instances WHERE user_id=@u AND (@s IS NULL OR state=@s) ORDER BY rowid)`,
          ).get({ u: userId, s: state ?? null }) as { j: string }
        ).j,
      getByIp: async (ip) => {
        const row = prep('SELECT id FROM instances WHERE private_ip=?').get(ip) as { id: string } | undefined;
        return row ? instanceById(row.id) : undefined;
      },
      hostLive: async () =>
        prep(
          "SELECT count(*) AS vms, coalesce(sum(memory_mb),0) AS memory_mb FROM instances WHERE state<>'stopped'",
        ).get() as { vms: number; memory_mb: number },
      ipTaken: async (ip) => prep('SELECT 1 FROM instances WHERE private_ip=?').get(ip) !== undefined,
      lastIp: async () =>
        (
          prep('SELECT private_ip FROM instances WHERE private_ip IS NOT NULL ORDER BY rowid DESC LIMIT 1').get() as
            { private_ip: string } | undefined
        )?.private_ip,
      inGroup: async (groupId) =>
        many<InstanceRec>(S.instances, 'SELECT * FROM instances WHERE service_group_id=? ORDER BY rowid', groupId),
      listIds: async (userId, state?: InstanceState) =>
        state === undefined
          ? (prep('SELECT id, name FROM instances WHERE user_id=? ORDER BY rowid').all(userId) as {
              id: string;
              name: string;
            }[])
          : (prep('SELECT id, name FROM instances WHERE user_id=? AND state=? ORDER BY rowid').all(userId, state) as {
              id: string;
              name: string;
            }[]),
    },
    groups: {
      ...userTable(S.groups),
      getAnyUser: async (id) => one(S.groups, 'SELECT * FROM service_groups WHERE id=?', id),
      all: async () => many(S.groups, 'SELECT * FROM service_groups ORDER BY rowid'),
    },
    domains: {
      get: async (fqdn) => one<DomainRec>(S.domains, 'SELECT * FROM domains WHERE fqdn=?', fqdn),
      forGroup: async (groupId) =>
        many<DomainRec>(S.domains, 'SELECT * FROM domains WHERE group_id=? ORDER BY rowid', groupId),
      forCertificate: async (certId) =>
        many<DomainRec>(S.domains, 'SELECT * FROM domains WHERE certificate_id=? ORDER BY rowid', certId),
      insert: (rec) => insert(S.domains, rec),
      deleteForGroup: async (groupId) => {
        prep('DELETE FROM domains WHERE group_id=?').run(groupId);
        write(S.domains, groupId);
      },
    },
    volumes: {
      ...userTable(S.volumes),
      forInstance: async (instanceId) =>
        many(S.volumes, 'SELECT * FROM volumes WHERE instance_id=? ORDER BY rowid', instanceId),
      all: async () => many(S.volumes, 'SELECT * FROM volumes ORDER BY rowid'),
      getAny: async (id) => one(S.volumes, 'SELECT * FROM volumes WHERE id=?', id),
    },
    certificates: {
      ...userTable(S.certificates),
      all: async () => many(S.certificates, 'SELECT * FROM certificates ORDER BY rowid'),
    },
    autoscale: {
      get: async (groupId) => one<AutoscaleRec>(S.autoscale, 'SELECT * FROM autoscale WHERE group_id=?', groupId),
      forMaster: async (id) => one<AutoscaleRec>(S.autoscale, 'SELECT * FROM autoscale WHERE master_id=?', id),
      insert: (rec) => insert(S.autoscale, rec),
      update: (groupId, patch) => update(S.autoscale, groupId, patch),
      delete: (groupId) => del(S.autoscale, groupId),
    },
    images: {
      get: async (digest) => one<ImageRec>(S.images, 'SELECT * FROM images WHERE digest=?', digest),
      upsert: async (rec) => {
        const row = toRow(S.images, rec);
        prep(
          `INSERT INTO images (digest, namespace, size_in_bytes, initrd, args, kernel_args, min_memory_mb, created_at)
             VALUES (@digest, @namespace, @size_in_bytes, @initrd, @args, @kernel_args, @min_memory_mb, @created_at)
             ON CONFLICT(digest) DO UPDATE SET size_in_bytes=excluded.size_in_bytes, initrd=excluded.initrd,
               args=excluded.args, kernel_args=excluded.kernel_args, min_memory_mb=excluded.min_memory_mb`,
        ).run(row);
        write(S.images, rec.digest);
      },
      list: async () => many<ImageRec>(S.images, 'SELECT * FROM images ORDER BY rowid'),
      tags: async () => many<TagRec>(S.tags, 'SELECT * FROM tags ORDER BY ref'),
      tag: async (ref) => one<TagRec>(S.tags, 'SELECT * FROM tags WHERE ref=?', ref),
      setTag: async (rec) => {
        prep(
          'INSERT INTO tags (ref, namespace, digest) VALUES (@ref, @namespace, @digest) ON CONFLICT(ref) DO UPDATE SET digest=excluded.digest',
        ).run(rec);
        write(S.tags, rec.ref);
      },
    },
    usage: async (userId) => prep(USAGE_SQL).get({ u: userId }) as Used,
  };
}

const USAGE_SQL = `SELECT
  (SELECT count(*) FROM instances WHERE user_id=@u) AS instances,
  (SELECT count(*) FROM instances WHERE user_id=@u AND state<>'stopped') AS live_instances,
  (SELECT coalesce(sum(memory_mb),0) FROM instances WHERE user_id=@u AND state<>'stopped') AS live_memory_mb,
  (SELECT count(*) FROM service_groups WHERE user_id=@u) AS service_groups,
  (SELECT coalesce(sum(json_array_length(services)),0) FROM service_groups WHERE user_id=@u) AS services,
  (SELECT count(*) FROM volumes WHERE user_id=@u) AS volumes,
  (SELECT coalesce(sum(size_mb),0) FROM volumes WHERE user_id=@u) AS total_volume_mb`;
