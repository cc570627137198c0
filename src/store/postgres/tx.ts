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

/** Runs one statement with `$n` parameters on the transaction's connection. */
export type Query = (text: string, params?: unknown[]) => Promise<Row[]>;

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

/** A host lease's renewal under its epoch ($1 the new end, $2 the host, $3 the epoch): a row changed, or none. */
export const RENEW_LEASE_SQL = 'UPDATE hosts SET lease_expires_at=$1 WHERE id=$2 AND epoch=$3';

/** A row as a record: the ordering column goes (jsonb, booleans and int8 come decoded by the client). */
function fromRow<T>(row: Row | undefined): T | undefined {
  if (!row) return undefined;
  delete row.seq;
  return row as T;
}

/** The columns and `$n` placeholders of a record's values; JSON columns are cast to jsonb. */
function valuesOf(spec: TableSpec, rec: object, first = 1): { names: string[]; marks: string[]; params: unknown[] } {
  const names = cols(rec);
  const params: unknown[] = [];
  const marks = names.map((k, i) => {
    const v = (rec as Row)[k];
    const json = spec.json.includes(k);
    // JSON as text, cast by the statement (the client would turn an array into a PostgreSQL array)
    params.push(json ? (v == null ? null : JSON.stringify(v)) : v === undefined ? null : v);
    return `$${first + i}${json ? '::jsonb' : ''}`;
  });
  return { names, marks, params };
}

/** Refuses a patch with fields of the other side of the state boundary (a bug, never client input). */
function onlyFields(patch: object, allowed: Set<string>, what: string): void {
  for (const k of Object.keys(patch))
    if (!allowed.has(k) || k === 'id') throw err('UH_INTERNAL', `'${k}' is not a field ${what} may write`);
}

/** `lock(name)` inside a transaction: checks that the attempt took it before it began (src/store/postgres/index.ts). */
export function makeTx(q: Query, pending: Pending | null, lock: (name: string) => void = () => undefined): Tx {
  const cur = (): Pending => {
    if (!pending) throw err('UH_INTERNAL', 'write outside a transaction');
    return pending;
  };
  const write = (spec: TableSpec, id: string): void => {
    cur().changes.set(`${spec.kind}:${id}`, { kind: spec.kind, id });
  };
  const one = async <T>(sql: string, ...p: unknown[]): Promise<T | undefined> => fromRow<T>((await q(sql, p))[0]);
  const many = async <T>(sql: string, ...p: unknown[]): Promise<T[]> => (await q(sql, p)).map((r) => fromRow<T>(r)!);
  const insertRow = async (spec: TableSpec, rec: object): Promise<void> => {
    const v = valuesOf(spec, rec);
    await q(`INSERT INTO ${spec.table} (${v.names.join(',')}) VALUES (${v.marks.join(',')})`, v.params);
  };
  const insert = async (spec: TableSpec, rec: object): Promise<void> => {
    cur();
    await insertRow(spec, rec);
    write(spec, String((rec as Row)[spec.key]));
  };
  const updateRow = async (spec: TableSpec, id: string, patch: object): Promise<boolean> => {
    const row: Row = { ...patch };
    delete row[spec.key];
    const v = valuesOf(spec, row, 2);
    if (v.names.length === 0) return false;
    const set = v.names.map((k, i) => `${k}=${v.marks[i]}`).join(',');
    await q(`UPDATE ${spec.table} SET ${set} WHERE ${spec.key}=$1`, [id, ...v.params]);
    return true;
  };
  const update = async (spec: TableSpec, id: string, patch: object): Promise<void> => {
    cur();
    if (await updateRow(spec, id, patch)) write(spec, id);
  };
  const del = async (spec: TableSpec, id: string): Promise<void> => {
    cur();
    await q(`DELETE FROM ${spec.table} WHERE ${spec.key}=$1`, [id]);
    write(spec, id);
  };
  /** ` AND col=$n` conditions of a filter object (null matches NULL). */
  const where = (spec: TableSpec, filter: object, first: number): { cond: string; params: unknown[] } => {
    const params: unknown[] = [];
    const cond = cols(filter)
      .map((k) => {
        const v = (filter as Row)[k];
        if (v === null) return ` AND ${k} IS NULL`;
        params.push(spec.json.includes(k) ? JSON.stringify(v) : v);
        return ` AND ${k}=$${first + params.length - 1}${spec.json.includes(k) ? '::jsonb' : ''}`;
      })
      .join('');
    return { cond, params };
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
  const userTable = <T extends { id: string; user_id: string; name: string }>(spec: TableSpec): UserTable<T> => ({
    get: (userId, id) => one<T>(`SELECT * FROM ${spec.table} WHERE id=$1 AND user_id=$2`, id, userId),
    getByName: (userId, name) => one<T>(`SELECT * FROM ${spec.table} WHERE user_id=$1 AND name=$2`, userId, name),
    list: async (userId, filter = {}) => {
      const w = where(spec, filter, 2);
      return many<T>(`SELECT * FROM ${spec.table} WHERE user_id=$1${w.cond} ORDER BY seq`, userId, ...w.params);
    },
    insert: (rec) => insert(spec, rec),
    update: (id, patch) => update(spec, id, patch),
    delete: (id) => del(spec, id),
  });
  const stateOf = (id: string) =>
    one<Pick<InstanceRec, 'id' | 'user_id' | 'name' | 'service_group_id' | 'state'>>(
      'SELECT id, user_id, name, service_group_id, state FROM instances JOIN instance_status USING (id) WHERE id=$1',
      id,
    );

  const S = SPECS;
  const instances: Tx['instances'] = {
    get: (userId, id) => one<InstanceRec>(`${SELECT_INSTANCE} WHERE id=$1 AND user_id=$2`, id, userId),
    getByName: (userId, name) => one<InstanceRec>(`${SELECT_INSTANCE} WHERE user_id=$1 AND name=$2`, userId, name),
    list: async (userId, filter = {}) => {
      const w = where(INSTANCE_SPEC, filter, 2);
      return many<InstanceRec>(`${SELECT_INSTANCE} WHERE user_id=$1${w.cond} ORDER BY seq`, userId, ...w.params);
    },
    insert: async (rec) => {
      cur();
      await insertRow(S.instances, pick(rec as unknown as Row, SPEC_FIELDS));
      await insertRow(S.status, { id: rec.id, ...pick(rec as unknown as Row, STATUS_FIELDS) });
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
      const i = await stateOf(id);
      if (!i) throw err('UH_NOT_FOUND', `instance ${id} was deleted meanwhile`);
      if (i.state !== from) throw err('UH_CONFLICT', `instance '${i.name}' is ${i.state}, not ${from}`);
      await updateRow(S.status, id, { ...patch, state: to });
      write(S.instances, id);
      if (from !== to) event(i, stateEvent(from, to, patch));
    },
    delete: async (id) => {
      cur();
      const i = await stateOf(id);
      if (!i) return;
      await q('DELETE FROM instances WHERE id=$1', [id]);
      write(S.instances, id);
      event(i, { type: 'deleted', from_state: i.state });
    },
    getAny: (id) => one<InstanceRec>(`${SELECT_INSTANCE} WHERE id=$1`, id),
    all: () => many<InstanceRec>(`${SELECT_INSTANCE} ORDER BY seq`),
    listJson: async (userId, state?: InstanceState) =>
      String(
        (
          await (state === undefined
            ? q(
                `SELECT coalesce(json_agg(json_build_object('uuid', id, 'name', name) ORDER BY seq), '[]'::json)::text AS j
                   FROM instances WHERE user_id=$1`,
                [userId],
              )
            : q(
                `SELECT coalesce(json_agg(json_build_object('uuid', id, 'name', name) ORDER BY seq), '[]'::json)::text AS j
                   FROM instances JOIN instance_status USING (id) WHERE user_id=$1 AND state=$2`,
                [userId, state],
              ))
        )[0]!.j,
      ),
    getByIp: (ip) => one<InstanceRec>(`${SELECT_INSTANCE} WHERE private_ip=$1`, ip),
    hostLive: async () =>
      (await q(
        `SELECT host_id, count(*)::int AS vms, coalesce(sum(memory_mb),0)::int AS memory_mb
           FROM instances JOIN instance_status USING (id) WHERE state NOT IN ('stopped', 'template', 'checkpoint')
           GROUP BY host_id`,
      )) as { host_id: string | null; vms: number; memory_mb: number }[],
    onHost: (hostId) => many<InstanceRec>(`${SELECT_INSTANCE} WHERE host_id=$1 ORDER BY seq`, hostId),
    ipTaken: async (ip) => (await q('SELECT 1 FROM instances WHERE private_ip=$1', [ip])).length > 0,
    lastIp: async () =>
      (await q('SELECT private_ip FROM instances WHERE private_ip IS NOT NULL ORDER BY seq DESC LIMIT 1'))[0]
        ?.private_ip as string | undefined,
    inGroup: (groupId) => many<InstanceRec>(`${SELECT_INSTANCE} WHERE service_group_id=$1 ORDER BY seq`, groupId),
    autoscaled: () =>
      many<InstanceRec>(
        `${SELECT_INSTANCE} WHERE service_group_id IN (SELECT group_id FROM autoscale WHERE enabled) ORDER BY seq`,
      ),
    listIds: (userId, state?: InstanceState) =>
      many<{ id: string; name: string }>(
        `SELECT id, name FROM instances JOIN instance_status USING (id)
           WHERE user_id=$1 AND ($2::text IS NULL OR state=$2) ORDER BY seq`,
        userId,
        state ?? null,
      ),
  };

  return {
    users: {
      get: (id) => one<UserRec>('SELECT * FROM users WHERE id=$1', id),
      getByName: (name) => one<UserRec>('SELECT * FROM users WHERE name=$1', name),
      insert: (rec) => insert(S.users, rec),
      update: (id, patch) => update(S.users, id, patch),
      list: () => many<UserRec>('SELECT * FROM users ORDER BY seq'),
    },
    tokens: {
      listForUser: (userId) => many<TokenRec>('SELECT * FROM tokens WHERE user_id=$1', userId),
      insert: (rec) => insert(S.tokens, rec),
      delete: (id) => del(S.tokens, id),
    },
    events: {
      after: (userId, after, f, limit) =>
        many<EventRec>(
          `SELECT user_seq AS id, at, user_id, instance_id, instance_name, group_id, type, from_state, to_state, stop_reason, exit_code, stop_code, message FROM events
             WHERE user_id=$1 AND user_seq>$2 AND ($3::text IS NULL OR instance_id=$3)
             AND ($4::text IS NULL OR instance_name=$4) AND ($5::text IS NULL OR group_id=$5) ORDER BY user_seq LIMIT $6`,
          userId,
          after,
          f.instanceId ?? null,
          f.instanceName ?? null,
          f.groupId ?? null,
          limit,
        ),
      lastId: async (userId) =>
        Number((await q('SELECT coalesce(max(user_seq), 0) AS id FROM events WHERE user_id=$1', [userId]))[0]!.id),
      notice: (i, message) => {
        event(i, { type: 'notice', message });
        // a change of the instance: event streams wake for it, and the commit writes it
        cur().changes.set(`instance:${i.id}`, { kind: 'instance', id: i.id });
      },
      prune: async (before) => {
        cur();
        const r = await q(
          `WITH gone AS (DELETE FROM events WHERE at < $1
             AND user_seq < (SELECT max(e2.user_seq) FROM events e2 WHERE e2.user_id = events.user_id) RETURNING 1)
           SELECT count(*)::int AS n FROM gone`,
          [before],
        );
        return Number(r[0]!.n);
      },
    },
    instances,
    hosts: {
      get: (id) => one<HostRec>('SELECT * FROM hosts WHERE id=$1', id),
      getByName: (name) => one<HostRec>('SELECT * FROM hosts WHERE name=$1', name),
      insert: (rec) => insert(S.hosts, rec),
      list: () => many<HostRec>('SELECT * FROM hosts ORDER BY seq'),
      update: (id, patch) => update(S.hosts, id, patch),
      delete: (id) => del(S.hosts, id),
      renew: async (id, epoch, expiresAt) => {
        cur();
        return (await q(`${RENEW_LEASE_SQL} RETURNING 1`, [expiresAt, id, epoch])).length > 0;
      },
    },
    groups: {
      ...userTable(S.groups),
      getAnyUser: (id) => one('SELECT * FROM service_groups WHERE id=$1', id),
      all: () => many('SELECT * FROM service_groups ORDER BY seq'),
    },
    domains: {
      get: (fqdn) => one<DomainRec>('SELECT * FROM domains WHERE fqdn=$1', fqdn),
      forGroup: (groupId) => many<DomainRec>('SELECT * FROM domains WHERE group_id=$1 ORDER BY seq', groupId),
      forCertificate: (certId) => many<DomainRec>('SELECT * FROM domains WHERE certificate_id=$1 ORDER BY seq', certId),
      insert: (rec) => insert(S.domains, rec),
      delete: (fqdn) => del(S.domains, fqdn),
      deleteForGroup: async (groupId) => {
        cur();
        await q('DELETE FROM domains WHERE group_id=$1', [groupId]);
        write(S.domains, groupId);
      },
    },
    volumes: {
      ...userTable(S.volumes),
      forInstance: (instanceId) => many('SELECT * FROM volumes WHERE instance_id=$1 ORDER BY seq', instanceId),
      all: () => many('SELECT * FROM volumes ORDER BY seq'),
      getAny: (id) => one('SELECT * FROM volumes WHERE id=$1', id),
    },
    certificates: {
      ...userTable(S.certificates),
      all: () => many('SELECT * FROM certificates ORDER BY seq'),
      named: (fqdn) => many('SELECT * FROM certificates WHERE common_name=$1 ORDER BY seq', fqdn),
    },
    autoscale: {
      get: (groupId) => one<AutoscaleRec>('SELECT * FROM autoscale WHERE group_id=$1', groupId),
      enabled: () => many<AutoscaleRec>('SELECT * FROM autoscale WHERE enabled ORDER BY group_id'),
      forMaster: (id) => one<AutoscaleRec>('SELECT * FROM autoscale WHERE master_id=$1', id),
      insert: (rec) => insert(S.autoscale, rec),
      update: (groupId, patch) => update(S.autoscale, groupId, patch),
      delete: (groupId) => del(S.autoscale, groupId),
    },
    images: {
      get: (digest) => one<ImageRec>('SELECT * FROM images WHERE digest=$1', digest),
      upsert: async (rec) => {
        cur();
        await q(
          `INSERT INTO images (digest, namespace, size_in_bytes, initrd, args, kernel_args, min_memory_mb, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (digest) DO UPDATE SET size_in_bytes=excluded.size_in_bytes, initrd=excluded.initrd,
               args=excluded.args, kernel_args=excluded.kernel_args, min_memory_mb=excluded.min_memory_mb`,
          [
            rec.digest,
            rec.namespace,
            rec.size_in_bytes,
            rec.initrd,
            rec.args,
            rec.kernel_args,
            rec.min_memory_mb,
            rec.created_at,
          ],
        );
        write(S.images, rec.digest);
      },
      list: () => many<ImageRec>('SELECT * FROM images ORDER BY seq'),
      tags: () => many<TagRec>('SELECT * FROM tags ORDER BY ref'),
      tag: (ref) => one<TagRec>('SELECT * FROM tags WHERE ref=$1', ref),
      setTag: async (rec) => {
        cur();
        await q(
          `INSERT INTO tags (ref, namespace, digest) VALUES ($1, $2, $3)
             ON CONFLICT (ref) DO UPDATE SET digest=excluded.digest`,
          [rec.ref, rec.namespace, rec.digest],
        );
        write(S.tags, rec.ref);
      },
      deleteTag: async (ref) => del(S.tags, ref),
      delete: async (digest) => del(S.images, digest),
    },
    registry: {
      link: async (rec) => {
        cur();
        await q(
          `INSERT INTO registry_links (repo, digest, namespace, size, media_type, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
          [rec.repo, rec.digest, rec.namespace, rec.size, rec.media_type, rec.created_at],
        );
        write(S.registryLinks, rec.repo);
      },
      getLink: (repo, digest) =>
        one<RegistryLinkRec>('SELECT * FROM registry_links WHERE repo=$1 AND digest=$2', repo, digest),
      inNamespace: async (namespace, digest) =>
        (await q('SELECT 1 FROM registry_links WHERE namespace=$1 AND digest=$2 LIMIT 1', [namespace, digest])).length >
        0,
      unlink: async (repo, digest) => {
        cur();
        await q('DELETE FROM registry_links WHERE repo=$1 AND digest=$2', [repo, digest]);
        write(S.registryLinks, repo);
      },
      links: (repo) =>
        repo === undefined
          ? many<RegistryLinkRec>('SELECT * FROM registry_links ORDER BY repo, digest')
          : many<RegistryLinkRec>('SELECT * FROM registry_links WHERE repo=$1 ORDER BY digest', repo),
      tag: (repo, tag) => one<RegistryTagRec>('SELECT * FROM registry_tags WHERE repo=$1 AND tag=$2', repo, tag),
      tags: (repo) =>
        repo === undefined
          ? many<RegistryTagRec>('SELECT * FROM registry_tags ORDER BY repo, tag')
          : many<RegistryTagRec>('SELECT * FROM registry_tags WHERE repo=$1 ORDER BY tag', repo),
      setTag: async (rec) => {
        cur();
        await q(
          `INSERT INTO registry_tags (repo, tag, digest) VALUES ($1, $2, $3)
             ON CONFLICT (repo, tag) DO UPDATE SET digest=excluded.digest`,
          [rec.repo, rec.tag, rec.digest],
        );
        write(S.registryTags, rec.repo);
      },
      deleteTag: async (repo, tag) => {
        cur();
        await q('DELETE FROM registry_tags WHERE repo=$1 AND tag=$2', [repo, tag]);
        write(S.registryTags, repo);
      },
    },
    blobs: {
      stat: async (digest) => {
        const r = (await q('SELECT size, chunks FROM blobs WHERE digest=$1', [digest]))[0];
        return r ? { size: Number(r.size), chunks: Number(r.chunks) } : undefined;
      },
      putChunk: async (digest, seq, data) => {
        cur();
        await q('INSERT INTO blob_chunks (digest, seq, data) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [
          digest,
          seq,
          data,
        ]);
      },
      finish: async (digest, size, chunks) => {
        cur();
        await q('INSERT INTO blobs (digest, size, chunks) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [
          digest,
          size,
          chunks,
        ]);
      },
      chunk: async (digest, seq) =>
        (await q('SELECT data FROM blob_chunks WHERE digest=$1 AND seq=$2', [digest, seq]))[0]?.data as
          Buffer | undefined,
    },
    figures: {
      put: async (source, at, data) => {
        cur();
        await q(
          `INSERT INTO figures (source, at, data) VALUES ($1, $2, $3::jsonb)
             ON CONFLICT (source) DO UPDATE SET at=excluded.at, data=excluded.data`,
          [source, at, JSON.stringify(data)],
        );
      },
      list: async () =>
        (await q('SELECT source, at, data FROM figures ORDER BY source')).map((r) => ({
          source: String(r.source),
          at: String(r.at),
          data: r.data as unknown,
        })),
    },
    lock: async (name) => {
      cur();
      lock(name);
    },
    usage: async (userId) => (await q(USAGE_SQL, [userId]))[0] as unknown as Used,
  };
}

const USAGE_SQL = `SELECT
  (SELECT count(*)::int FROM instances WHERE user_id=$1) AS instances,
  (SELECT count(*)::int FROM instances JOIN instance_status USING (id)
     WHERE user_id=$1 AND state NOT IN ('stopped', 'template', 'checkpoint')) AS live_instances,
  (SELECT coalesce(sum(memory_mb),0)::int FROM instances JOIN instance_status USING (id)
     WHERE user_id=$1 AND state NOT IN ('stopped', 'template', 'checkpoint')) AS live_memory_mb,
  (SELECT count(*)::int FROM service_groups WHERE user_id=$1) AS service_groups,
  (SELECT coalesce(sum(jsonb_array_length(services)),0)::int FROM service_groups WHERE user_id=$1) AS services,
  (SELECT count(*)::int FROM volumes WHERE user_id=$1) AS volumes,
  (SELECT coalesce(sum(size_mb),0)::int FROM volumes WHERE user_id=$1) AS total_volume_mb,
  (SELECT ((coalesce(sum(size),0)::bigint + 1048575) / 1048576)::int FROM
     (SELECT DISTINCT digest, size FROM registry_links
        WHERE namespace=(SELECT name FROM users WHERE id=$1)) AS l) AS registry_mb,
  (SELECT count(*)::int FROM domains WHERE user_id=$1) AS domains,
  (SELECT count(*)::int FROM certificates WHERE user_id=$1) AS certificates,
  (SELECT ((coalesce(sum((snapshot->>'bytes')::bigint),0)::bigint + 1048575) / 1048576)::int FROM instances
     JOIN instance_status USING (id) WHERE user_id=$1 AND snapshot IS NOT NULL) AS snapshot_mb`;
