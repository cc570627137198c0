/**
 * How records map to rows, shared by both stores: which columns hold JSON,
 * which hold booleans, and what a change of each table is announced as on
 * the change feed.
 */
import { err } from '../errors.js';
import type { ChangeKind, EventRec, InstanceState, StatusPatch } from './types.js';

export type Row = Record<string, unknown>;

export interface TableSpec {
  table: string;
  key: string;
  kind: ChangeKind;
  json: readonly string[];
  bool: readonly string[];
}

export const SPECS = {
  users: { table: 'users', key: 'id', kind: 'user', json: ['quotas'], bool: ['developer'] },
  tokens: { table: 'tokens', key: 'id', kind: 'user', json: [], bool: [] },
  instances: {
    table: 'instances',
    key: 'id',
    kind: 'instance',
    json: ['args', 'env', 'features', 'tags', 'annotations'],
    bool: ['delete_lock'],
  },
  status: {
    table: 'instance_status',
    key: 'id',
    kind: 'instance',
    json: ['stop_request', 'runtime', 'snapshot'],
    bool: [],
  },
  hosts: { table: 'hosts', key: 'id', kind: 'host', json: [], bool: [] },
  groups: { table: 'service_groups', key: 'id', kind: 'group', json: ['services'], bool: ['persistent'] },
  domains: { table: 'domains', key: 'fqdn', kind: 'group', json: [], bool: [] },
  volumes: {
    table: 'volumes',
    key: 'id',
    kind: 'volume',
    json: ['tags'],
    bool: ['persistent', 'readonly', 'delete_lock'],
  },
  certificates: { table: 'certificates', key: 'id', kind: 'certificate', json: ['names'], bool: ['proven'] },
  autoscale: { table: 'autoscale', key: 'group_id', kind: 'autoscale', json: ['policies'], bool: ['enabled'] },
  images: { table: 'images', key: 'digest', kind: 'image', json: [], bool: ['initrd'] },
  tags: { table: 'tags', key: 'ref', kind: 'image', json: [], bool: [] },
  registryLinks: { table: 'registry_links', key: 'repo', kind: 'image', json: [], bool: [] },
  registryTags: { table: 'registry_tags', key: 'repo', kind: 'image', json: [], bool: [] },
} as const satisfies Record<string, TableSpec>;

/** An instance as read: both tables' columns (`id` once). */
export const INSTANCE_JSON = [...SPECS.instances.json, ...SPECS.status.json] as const;

/** Column names are fixed by the schema; refuse anything else before it reaches SQL text. */
const IDENT = /^[a-z_][a-z0-9_]*$/;
export function cols(obj: object): string[] {
  const keys = Object.keys(obj);
  for (const k of keys) if (!IDENT.test(k)) throw err('UH_INTERNAL', `bad column name ${k}`);
  return keys;
}

/** Splits an object into the keys of `a` and the rest. */
export function pick(obj: Row, keys: readonly string[]): Row {
  const out: Row = {};
  for (const k of keys) if (k in obj) out[k] = obj[k];
  return out;
}

/**
 * The event of a state change from `from` to `to` with the status `patch`
 * that goes with it: a stop's fields (reason, exit code, stop code) are part
 * of the event that records the stop (instance history). Both stores' setState.
 */
export function stateEvent(from: InstanceState, to: InstanceState, patch: StatusPatch): Partial<EventRec> {
  const ended = to === 'stopped' || to === 'standby';
  return {
    type: 'state',
    from_state: from,
    to_state: to,
    ...(ended
      ? {
          stop_reason: patch.stop_reason ?? null,
          exit_code: patch.exit_code ?? null,
          stop_code: patch.stop_code ?? null,
        }
      : {}),
  };
}
