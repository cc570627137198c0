import type Database from 'better-sqlite3';
import { err } from '../../errors.js';
import { cols, INSTANCE_JSON, pick, SPECS, stateEvent, type Row, type TableSpec } from '../tables.js';
import {
  SPEC_FIELDS,
  STATUS_FIELDS,
  type AutoscaleRec,
  type Change,
  type DomainRec,
  type EventRec,
  type HostRec,
  type ImageRec,
  type RegistryLinkRec,
  type RegistryTagRec,
  type InstanceRec,
  type InstanceState,
  type TagRec,
  type TokenRec,
  type Tx,
  type Used,
  type UserRec,
  type UserTable,
} from '../types.js';

/** An instance event as the store appends it at commit. */
export type EventRow = Omit<EventRec, 'id'>;

/** What a transaction under way has changed: announced on the feed, and its events, at commit. */
export interface Pending {
  changes: Map<string, Change>;
  events: EventRow[];
}

const INSTANCE_SPEC: TableSpec = { ...SPECS.instances, json: INSTANCE_JSON };
const STATUS_ONLY = new Set<string>(STATUS_FIELDS);
const SPEC_ONLY = new Set<string>(SPEC_FIELDS);
const SELECT_INSTANCE = 'SELECT * FROM instances JOIN instance_status USING (id)';

function fromRow<T>(spec: TableSpec, row: Row | undefined): T | undefined {
  if (!row) return undefined;
  for (const c of spec.json) if (c in row) row[c] = row[c] == null ? null : JSON.parse(row[c] as string);
  for (const c of spec.bool) if (c in row) row[c] = row[c] === 1;
  return row as T;
}

function toRow(spec: TableSpec, rec: object): Row {
  const row: Row = { ...rec };
  for (const c of spec.json) if (c in row) row[c] = row[c] == null ? null : JSON.stringify(row[c]);
  for (const c of spec.bool) if (c in row) row[c] = row[c] ? 1 : 0;
  return row;
}

/** A bounded map of frozen records; cleared when full (simple, and misses are cheap). */
export class RowCache<T extends object> {
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
  clear(): void {
    this.m.clear();
  }
}

/** Refuses a patch with fields of the other side of the state boundary (a bug, never client input). */
function onlyFields(patch: object, allowed: Set<string>, what: string): void {
  for (const k of Object.keys(patch))
    if (!allowed.has(k) || k === 'id') throw err('UH_INTERNAL', `'${k}' is not a field ${what} may write`);
}

export function makeTx(
  db: Database.Database,
  pending: { cur: Pending | null },
  cache: RowCache<InstanceRec> | null,
): Tx {
  const statements = new Map<string, Database.Statement>();
  const prep = (sql: string): Database.Statement => {
    let s = statements.get(sql);
    if (!s) {
      s = db.prepare(sql);
      statements.set(sql, s);
    }
    return s;
  };
  const cur = (): Pending => {
    if (!pending.cur) throw err('UH_INTERNAL', 'write outside a transaction');
    return pending.cur;
  };
  const write = (spec: TableSpec, id: string): void => {
    cur().changes.set(`${spec.kind}:${id}`, { kind: spec.kind, id });
  };
  const one = <T>(spec: TableSpec, sql: string, ...p: unknown[]): T | undefined =>
    fromRow<T>(spec, prep(sql).get(...p) as Row | undefined);
  const many = <T>(spec: TableSpec, sql: string, ...p: unknown[]): T[] =>
    (prep(sql).all(...p) as Row[]).map((r) => fromRow<T>(spec, r)!);
  const insertRow = (spec: TableSpec, rec: object): void => {
    const row = toRow(spec, rec);
    const c = cols(row);
    prep(`INSERT INTO ${spec.table} (${c.join(',')}) VALUES (${c.map((k) => '@' + k).join(',')})`).run(row);
  };
  const insert = async (spec: TableSpec, rec: object): Promise<void> => {
    cur();
    insertRow(spec, rec);
    write(spec, String((rec as Row)[spec.key]));
  };
  const updateRow = (spec: TableSpec, id: string, patch: object): boolean => {
    const row = toRow(spec, patch);
    delete row[spec.key];
    const c = cols(row);
    if (c.length === 0) return false;
    prep(`UPDATE ${spec.table} SET ${c.map((k) => `${k}=@${k}`).join(',')} WHERE ${spec.key}=@__key`).run({
      ...row,
      __key: id,
    });
    return true;
  };
  const update = async (spec: TableSpec, id: string, patch: object): Promise<void> => {
    cur();
    if (updateRow(spec, id, patch)) write(spec, id);
  };
  const del = async (spec: TableSpec, id: string): Promise<void> => {
    cur();
    prep(`DELETE FROM ${spec.table} WHERE ${spec.key}=?`).run(id);
    write(spec, id);
  };
  const event = (i: Pick<InstanceRec, 'id' | 'user_id' | 'name' | 'service_group_id'>, e: Partial<EventRow>): void => {
    cur().events.push({
      at: new Date().toISOString(),
      user_id: i.user_id,
      instance_id: i.id,
      instance_name: i.name,
      group_id: i.service_group_id,
      type: 'state',
      from_state: null,
      to_state: null,
      stop_reason: null,
      exit_code: null,
      stop_code: null,
      message: null,
      ...e,
    });
  };
  /** Read path: rows by id through the cache; names resolve to ids with a covering index lookup. */
  const instanceById = (id: string): InstanceRec | undefined => {
    const hit = cache?.get(id);
    if (hit) return hit;
    const rec = one<InstanceRec>(INSTANCE_SPEC, `${SELECT_INSTANCE} WHERE id=?`, id);
    return rec && cache ? cache.set(id, rec) : rec;
  };
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
  const ids = (sql: string, ...p: unknown[]) => prep(sql).all(...p) as { id: string; name: string }[];

  const S = SPECS;
  const instances: Tx['instances'] = {
    get: async (userId, id) => {
      const rec = instanceById(id);
      return rec?.user_id === userId ? rec : undefined;
    },
    getByName: async (userId, name) => {
      const row = prep('SELECT id FROM instances WHERE user_id=? AND name=?').get(userId, name) as
        { id: string } | undefined;
      return row ? instanceById(row.id) : undefined;
    },
    list: async (userId, where = {}) => {
      const row = toRow(INSTANCE_SPEC, where);
      const c = cols(row);
      const cond = c.map((k) => (row[k] === null ? ` AND ${k} IS NULL` : ` AND ${k}=@${k}`)).join('');
      const params = Object.fromEntries(c.filter((k) => row[k] !== null).map((k) => [k, row[k]]));
      return many<InstanceRec>(INSTANCE_SPEC, `${SELECT_INSTANCE} WHERE user_id=@__u${cond} ORDER BY instances.rowid`, {
        ...params,
        __u: userId,
      });
    },
    insert: async (rec) => {
      cur();
      insertRow(S.instances, pick(rec as unknown as Row, SPEC_FIELDS));
      insertRow(S.status, { id: rec.id, ...pick(rec as unknown as Row, STATUS_FIELDS) });
      write(S.instances, rec.id);
      event(rec, { type: 'created', to_state: rec.state });
    },
    updateSpec: async (id, patch) => {
      onlyFields(patch, SPEC_ONLY, 'a service');
      await update(S.instances, id, patch);
    },
    updateStatus: async (id, patch) => {
      onlyFields(patch, STATUS_ONLY, 'a reconciler');
      if ('state' in patch || 'stop_request' in patch)
        throw err('UH_INTERNAL', 'state and stop_request change only through the state table');
      await update(S.status, id, patch);
    },
    setState: async (id, from, to, patch) => {
      onlyFields(patch, STATUS_ONLY, 'a trigger');
      cur();
      const i = prep(
        'SELECT id, user_id, name, service_group_id, state FROM instances JOIN instance_status USING (id) WHERE id=?',
      ).get(id) as (Pick<InstanceRec, 'id' | 'user_id' | 'name' | 'service_group_id'> & { state: string }) | undefined;
      if (!i) throw err('UH_NOT_FOUND', `instance ${id} was deleted meanwhile`);
      if (i.state !== from) throw err('UH_CONFLICT', `instance '${i.name}' is ${i.state}, not ${from}`);
      updateRow(S.status, id, { ...patch, state: to });
      write(S.instances, id);
      if (from !== to) event(i, stateEvent(from, to, patch));
    },
    delete: async (id) => {
      cur();
      const i = prep(
        'SELECT id, user_id, name, service_group_id, state FROM instances JOIN instance_status USING (id) WHERE id=?',
      ).get(id) as
        (Pick<InstanceRec, 'id' | 'user_id' | 'name' | 'service_group_id'> & { state: InstanceState }) | undefined;
      if (!i) return;
      prep('DELETE FROM instances WHERE id=?').run(id);
      write(S.instances, id);
      event(i, { type: 'deleted', from_state: i.state });
    },
    getAny: async (id) => instanceById(id),
    all: async () => many<InstanceRec>(INSTANCE_SPEC, `${SELECT_INSTANCE} ORDER BY instances.rowid`),
    listJson: async (userId, state?: InstanceState) =>
      (
        prep(
          `SELECT coalesce(json_group_array(json_object('uuid', id, 'name', name)), '[]') AS j FROM
             (SELECT id, name FROM instances JOIN instance_status USING (id)
               WHERE user_id=@u AND (@s IS NULL OR state=@s) ORDER BY instances.rowid)`,
        ).get({ u: userId, s: state ?? null }) as { j: string }
      ).j,
    getByIp: async (ip) => {
      const row = prep('SELECT id FROM instances WHERE private_ip=?').get(ip) as { id: string } | undefined;
      return row ? instanceById(row.id) : undefined;
    },
    hostLive: async () =>
      prep(
        `SELECT host_id, count(*) AS vms, coalesce(sum(memory_mb),0) AS memory_mb FROM instances
           JOIN instance_status USING (id) WHERE state NOT IN ('stopped', 'template', 'checkpoint') GROUP BY host_id`,
      ).all() as { host_id: string | null; vms: number; memory_mb: number }[],
    onHost: async (hostId) =>
      many<InstanceRec>(INSTANCE_SPEC, `${SELECT_INSTANCE} WHERE host_id=? ORDER BY instances.rowid`, hostId),
    ipTaken: async (ip) => prep('SELECT 1 FROM instances WHERE private_ip=?').get(ip) !== undefined,
    lastIp: async () =>
      (
        prep('SELECT private_ip FROM instances WHERE private_ip IS NOT NULL ORDER BY rowid DESC LIMIT 1').get() as
          { private_ip: string } | undefined
      )?.private_ip,
    inGroup: async (groupId) =>
      many<InstanceRec>(INSTANCE_SPEC, `${SELECT_INSTANCE} WHERE service_group_id=? ORDER BY instances.rowid`, groupId),
    autoscaled: async () =>
      many<InstanceRec>(
        INSTANCE_SPEC,
        `${SELECT_INSTANCE} WHERE service_group_id IN (SELECT group_id FROM autoscale WHERE enabled=1)
           ORDER BY instances.rowid`,
      ),
    listIds: async (userId, state?: InstanceState) =>
      state === undefined
        ? ids('SELECT id, name FROM instances WHERE user_id=? ORDER BY rowid', userId)
        : ids(
            `SELECT id, name FROM instances JOIN instance_status USING (id) WHERE user_id=? AND state=?
               ORDER BY instances.rowid`,
            userId,
            state,
          ),
  };

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
          `SELECT user_seq AS id, at, user_id, instance_id, instance_name, group_id, type, from_state, to_state, stop_reason, exit_code, stop_code, message FROM events
             WHERE user_id=@u AND user_seq>@after AND (@i IS NULL OR instance_id=@i)
             AND (@n IS NULL OR instance_name=@n) AND (@g IS NULL OR group_id=@g) ORDER BY user_seq LIMIT @limit`,
        ).all({
          u: userId,
          after,
          i: f.instanceId ?? null,
          n: f.instanceName ?? null,
          g: f.groupId ?? null,
          limit,
        }) as EventRec[],
      lastId: async (userId) =>
        (prep('SELECT coalesce(max(user_seq), 0) AS id FROM events WHERE user_id=?').get(userId) as { id: number }).id,
      notice: (i, message) => {
        event(i, { type: 'notice', message });
        // a change of the instance: event streams wake for it, and the commit writes it
        cur().changes.set(`instance:${i.id}`, { kind: 'instance', id: i.id });
      },
      prune: async (before) => {
        cur();
        return prep(PRUNE_SQL.replace('$1', '?')).run(before).changes;
      },
    },
    instances,
    hosts: {
      get: async (id) => one<HostRec>(S.hosts, 'SELECT * FROM hosts WHERE id=?', id),
      getByName: async (name) => one<HostRec>(S.hosts, 'SELECT * FROM hosts WHERE name=?', name),
      insert: (rec) => insert(S.hosts, rec),
      list: async () => many<HostRec>(S.hosts, 'SELECT * FROM hosts ORDER BY rowid'),
      update: (id, patch) => update(S.hosts, id, patch),
      delete: (id) => del(S.hosts, id),
      renew: async (id, epoch, expiresAt) => {
        cur();
        return prep('UPDATE hosts SET lease_expires_at=? WHERE id=? AND epoch=?').run(expiresAt, id, epoch).changes > 0;
      },
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
      delete: (fqdn) => del(S.domains, fqdn),
      deleteForGroup: async (groupId) => {
        cur();
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
      named: async (fqdn) =>
        many(S.certificates, 'SELECT * FROM certificates WHERE common_name=? ORDER BY rowid', fqdn),
    },
    autoscale: {
      get: async (groupId) => one<AutoscaleRec>(S.autoscale, 'SELECT * FROM autoscale WHERE group_id=?', groupId),
      enabled: async () => many<AutoscaleRec>(S.autoscale, 'SELECT * FROM autoscale WHERE enabled=1 ORDER BY rowid'),
      forMaster: async (id) => one<AutoscaleRec>(S.autoscale, 'SELECT * FROM autoscale WHERE master_id=?', id),
      insert: (rec) => insert(S.autoscale, rec),
      update: (groupId, patch) => update(S.autoscale, groupId, patch),
      delete: (groupId) => del(S.autoscale, groupId),
    },
    images: {
      get: async (digest) => one<ImageRec>(S.images, 'SELECT * FROM images WHERE digest=?', digest),
      upsert: async (rec) => {
        cur();
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
        cur();
        prep(
          'INSERT INTO tags (ref, namespace, digest) VALUES (@ref, @namespace, @digest) ON CONFLICT(ref) DO UPDATE SET digest=excluded.digest',
        ).run(rec);
        write(S.tags, rec.ref);
      },
      deleteTag: async (ref) => del(S.tags, ref),
      delete: async (digest) => del(S.images, digest),
    },
    registry: {
      link: async (rec) => {
        cur();
        prep(
          `INSERT INTO registry_links (repo, digest, namespace, size, media_type, created_at)
             VALUES (@repo, @digest, @namespace, @size, @media_type, @created_at) ON CONFLICT DO NOTHING`,
        ).run(rec);
        write(S.registryLinks, rec.repo);
      },
      getLink: async (repo, digest) =>
        one<RegistryLinkRec>(S.registryLinks, 'SELECT * FROM registry_links WHERE repo=? AND digest=?', repo, digest),
      inNamespace: async (namespace, digest) =>
        prep('SELECT 1 FROM registry_links WHERE namespace=? AND digest=? LIMIT 1').get(namespace, digest) !==
        undefined,
      unlink: async (repo, digest) => {
        cur();
        prep('DELETE FROM registry_links WHERE repo=? AND digest=?').run(repo, digest);
        write(S.registryLinks, repo);
      },
      links: async (repo) =>
        repo === undefined
          ? many<RegistryLinkRec>(S.registryLinks, 'SELECT * FROM registry_links ORDER BY repo, digest')
          : many<RegistryLinkRec>(S.registryLinks, 'SELECT * FROM registry_links WHERE repo=? ORDER BY digest', repo),
      tag: async (repo, tag) =>
        one<RegistryTagRec>(S.registryTags, 'SELECT * FROM registry_tags WHERE repo=? AND tag=?', repo, tag),
      tags: async (repo) =>
        repo === undefined
          ? many<RegistryTagRec>(S.registryTags, 'SELECT * FROM registry_tags ORDER BY repo, tag')
          : many<RegistryTagRec>(S.registryTags, 'SELECT * FROM registry_tags WHERE repo=? ORDER BY tag', repo),
      setTag: async (rec) => {
        cur();
        prep(
          'INSERT INTO registry_tags (repo, tag, digest) VALUES (@repo, @tag, @digest) ON CONFLICT DO UPDATE SET digest=excluded.digest',
        ).run(rec);
        write(S.registryTags, rec.repo);
      },
      deleteTag: async (repo, tag) => {
        cur();
        prep('DELETE FROM registry_tags WHERE repo=? AND tag=?').run(repo, tag);
        write(S.registryTags, repo);
      },
    },
    blobs: {
      stat: async (digest) =>
        prep('SELECT size, chunks FROM blobs WHERE digest=?').get(digest) as
          { size: number; chunks: number } | undefined,
      putChunk: async (digest, seq, data) => {
        cur();
        prep('INSERT INTO blob_chunks (digest, seq, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING').run(
          digest,
          seq,
          data,
        );
      },
      finish: async (digest, size, chunks) => {
        cur();
        prep('INSERT INTO blobs (digest, size, chunks) VALUES (?, ?, ?) ON CONFLICT DO NOTHING').run(
          digest,
          size,
          chunks,
        );
      },
      chunk: async (digest, seq) =>
        (prep('SELECT data FROM blob_chunks WHERE digest=? AND seq=?').get(digest, seq) as { data: Buffer } | undefined)
          ?.data,
    },
    figures: {
      put: async (source, at, data) => {
        cur();
        prep(
          'INSERT INTO figures (source, at, data) VALUES (?, ?, ?) ON CONFLICT(source) DO UPDATE SET at=excluded.at, data=excluded.data',
        ).run(source, at, JSON.stringify(data));
      },
      list: async () =>
        (prep('SELECT source, at, data FROM figures ORDER BY source').all() as Row[]).map((r) => ({
          source: String(r.source),
          at: String(r.at),
          data: JSON.parse(String(r.data)) as unknown,
        })),
    },
    lock: async () => void cur(), // one writer at a time already
    usage: async (userId) => prep(USAGE_SQL).get({ u: userId }) as Used,
  };
}

/** Events older than $1, except each user's newest (its id is where the user's numbering goes on). */
const PRUNE_SQL = `DELETE FROM events WHERE at < $1
  AND user_seq < (SELECT max(e2.user_seq) FROM events e2 WHERE e2.user_id = events.user_id)`;

const USAGE_SQL = `SELECT
  (SELECT count(*) FROM instances WHERE user_id=@u) AS instances,
  (SELECT count(*) FROM instances JOIN instance_status USING (id) WHERE user_id=@u AND state NOT IN ('stopped', 'template', 'checkpoint')) AS live_instances,
  (SELECT coalesce(sum(memory_mb),0) FROM instances JOIN instance_status USING (id)
     WHERE user_id=@u AND state NOT IN ('stopped', 'template', 'checkpoint')) AS live_memory_mb,
  (SELECT count(*) FROM service_groups WHERE user_id=@u) AS service_groups,
  (SELECT coalesce(sum(json_array_length(services)),0) FROM service_groups WHERE user_id=@u) AS services,
  (SELECT count(*) FROM volumes WHERE user_id=@u) AS volumes,
  (SELECT coalesce(sum(size_mb),0) FROM volumes WHERE user_id=@u) AS total_volume_mb,
  (SELECT (coalesce(sum(size),0) + 1048575) / 1048576 FROM
     (SELECT DISTINCT digest, size FROM registry_links
        WHERE namespace=(SELECT name FROM users WHERE id=@u))) AS registry_mb,
  (SELECT count(*) FROM domains WHERE user_id=@u) AS domains,
  (SELECT count(*) FROM certificates WHERE user_id=@u) AS certificates,
  (SELECT (coalesce(sum(json_extract(snapshot, '$.bytes')),0) + 1048575) / 1048576 FROM instances
     JOIN instance_status USING (id) WHERE user_id=@u AND snapshot IS NOT NULL) AS snapshot_mb`;
