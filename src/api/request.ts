import { FormatRegistry, Kind, Type, type TObject, type TSchema } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { checkName, POLICY_NAME_MAX } from '../domain/names.js';
import { err, isUnihostError } from '../errors.js';
import { NAME_FORMAT, POLICY_NAME_FORMAT, Bool, Int, Name, Uuid, Opt } from './schemas/common.js';
import type { EndpointDef, Entry, Target } from './endpoint.js';

export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
FormatRegistry.Set('uuid', (v) => UUID_RE.test(v));
FormatRegistry.Set(NAME_FORMAT, (v) => checkName(v).ok);
FormatRegistry.Set(POLICY_NAME_FORMAT, (v) => checkName(v, POLICY_NAME_MAX).ok);

/** Everything the framework precomputes for one endpoint. */
export interface Compiled {
  def: EndpointDef;
  entrySchema: TObject;
  check: TypeCheck<TObject>;
  queryProps: Record<string, TSchema>;
  /** query-only parameters: the endpoint's own, plus the list parameters of listing endpoints */
  query: TObject | undefined;
}

/** Query parameters of a target-less GET that lists (`EndpointDef.list`); `details` also applies to gets. */
const LIST_QUERY = {
  details: Opt(Bool('Default true; false returns a summary (uuid, name and, where there is one, state).')),
  count: Opt(Int('List mode (no uuid/name): page size.', { minimum: 1 })),
  from: Opt(Uuid('List mode: continue after this object.')),
};

function queryOf(def: EndpointDef): TObject | undefined {
  if (!def.list) return def.query;
  return Type.Object({ ...LIST_QUERY, ...def.query?.properties }, { additionalProperties: false });
}

export function compile(def: EndpointDef): Compiled {
  const props: Record<string, TSchema> = { ...def.params.properties };
  if (def.target === 'required') {
    props.uuid = Opt(Uuid('UUID of the target object (global scope only).'));
    props.name = Opt(Name('Name of the target object (global scope only).'));
  }
  const entrySchema = Type.Object(props, { additionalProperties: false });
  const query = queryOf(def);
  const queryProps: Record<string, TSchema> = { ...(query?.properties ?? {}) };
  // GET requests cannot carry a body from every client: each body parameter may come in the query too.
  if (def.method === 'GET') Object.assign(queryProps, props);
  return { def, entrySchema, check: TypeCompiler.Compile(entrySchema), queryProps, query };
}

/** Quotes a client-chosen key so the message stays readable whatever it holds (quotes, spaces, control characters). */
const quoteKey = (k: string): string => (/^[\x21-\x26\x28-\x7e]+$/.test(k) ? `'${k}'` : JSON.stringify(k));

function describe(path: string, schema: TSchema, value: unknown, message: string): string {
  const where = path === '' ? 'body' : `parameter '${path.slice(1).replace(/\//g, '.')}'`;
  if (schema.format === NAME_FORMAT || schema.format === POLICY_NAME_FORMAT) {
    const max = schema.format === POLICY_NAME_FORMAT ? POLICY_NAME_MAX : undefined;
    const r = typeof value === 'string' ? checkName(value, max) : null;
    if (r && !r.ok) return `${where}: name '${value}' is invalid: it ${r.why}`;
  }
  if (schema.format === 'uuid' && typeof value === 'string') return `${where}: '${value}' is not a valid UUID`;
  if (message === 'Unexpected property' && schema[Kind] === 'Record') {
    const at = path.lastIndexOf('/');
    const custom = (schema as { errorMessage?: string }).errorMessage;
    return `parameter '${path.slice(1, at).replace(/\//g, '.')}': key '${path.slice(at + 1)}' is not allowed${custom ? `: ${custom}` : ''}`;
  }
  if (message === 'Unexpected property') {
    const at = path.lastIndexOf('/');
    const parent = path.slice(1, at).replace(/\//g, '.');
    const key = path.slice(at + 1);
    if (key === '') return parent ? `parameter '${parent}': a key is empty` : 'body: a parameter has an empty name';
    return `unknown parameter ${quoteKey(parent ? `${parent}.${key}` : key)}`;
  }
  const custom = (schema as { errorMessage?: string }).errorMessage;
  return `${where}: ${custom ?? message.charAt(0).toLowerCase() + message.slice(1)}`;
}

/** Validates one entry; throws a 400 naming the first problem. */
function validate(c: Compiled, value: unknown, index: number | null): void {
  if (c.check.Check(value)) return;
  const first = c.check.Errors(value).First();
  const msg = first ? describe(first.path, first.schema, first.value, first.message) : 'invalid body';
  throw err('UH_INVALID', index === null ? msg : `entry ${index}: ${msg}`);
}

/** Runs the endpoint's own parameter rules; prefixes the entry index in a batch. */
function runCheck(def: EndpointDef, params: Record<string, unknown>, index: number | null): void {
  if (!def.check) return;
  try {
    def.check(params);
  } catch (e) {
    if (index === null || !isUnihostError(e)) throw e;
    throw err(e.code, `entry ${index}: ${e.message}`);
  }
}

/** Lower-cases every value whose schema is a name, in place. */
function normalizeNames(schema: TSchema, value: unknown): unknown {
  if (typeof value === 'string' && (schema.format === NAME_FORMAT || schema.format === POLICY_NAME_FORMAT)) {
    return value.toLowerCase();
  }
  if (Array.isArray(value) && schema[Kind] === 'Array') {
    for (let i = 0; i < value.length; i++) value[i] = normalizeNames(schema.items as TSchema, value[i]);
  } else if (value && typeof value === 'object' && schema[Kind] === 'Object') {
    const o = value as Record<string, unknown>;
    for (const [k, s] of Object.entries(schema.properties as Record<string, TSchema>)) {
      if (o[k] !== undefined) o[k] = normalizeNames(s, o[k]);
    }
  }
  return value;
}

function coerce(key: string, schema: TSchema | undefined, raw: string | string[]): unknown {
  if (!schema) throw err('UH_INVALID', `unknown query parameter '${key}'`);
  const values = Array.isArray(raw) ? raw : [raw];
  const one = (v: string): unknown => {
    switch (schema.type) {
      case 'integer':
      case 'number': {
        const n = Number(v);
        if (v.trim() === '' || !Number.isFinite(n))
          throw err('UH_INVALID', `query parameter '${key}': expected a number`);
        return n;
      }
      case 'boolean':
        if (v === '' || v === 'true' || v === '1') return true;
        if (v === 'false' || v === '0') return false;
        throw err('UH_INVALID', `query parameter '${key}': expected true or false`);
      default:
        return v;
    }
  };
  if (schema.type === 'array') return values.flatMap((v) => v.split(',')).filter((v) => v !== '');
  if (values.length > 1) throw err('UH_INVALID', `query parameter '${key}' given more than once`);
  return one(values[0]!);
}

export interface Parsed {
  entries: Entry<Record<string, unknown>>[];
  query: Record<string, unknown>;
  /** true when the client sent an array (batch), so the answer is per entry */
  batch: boolean;
}

function targetsFromQuery(q: Record<string, string | string[]>): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const key of ['uuid', 'name'] as const) {
    const raw = q[key];
    if (raw === undefined) continue;
    for (const v of (Array.isArray(raw) ? raw : [raw]).flatMap((s) => s.split(','))) {
      if (v !== '') out.push({ [key]: v });
    }
  }
  return out;
}

/**
 * Turns body, query and path into validated entries, per the spec's scope
 * rules. Throws a whole-request error (400) for anything invalid, so nothing
 * of a batch runs when one entry is bad.
 */
export function parseRequest(
  c: Compiled,
  body: unknown,
  rawQuery: Record<string, string | string[]>,
  pathUuid: string | undefined,
  pathParams: Record<string, string> = {},
): Parsed {
  const { def } = c;
  const local = pathUuid !== undefined;
  const qTargets = def.target === 'required' ? targetsFromQuery(rawQuery) : [];
  const query: Record<string, unknown> = {};
  const qParams: Record<string, unknown> = {};
  for (const [k, raw] of Object.entries(rawQuery)) {
    if (def.target === 'required' && (k === 'uuid' || k === 'name')) continue;
    const v = coerce(k, c.queryProps[k], raw);
    if (c.query?.properties[k]) query[k] = v;
    else qParams[k] = v;
  }
  if (c.query) validateQuery(c.query, query);

  if (body !== undefined && body !== null && typeof body !== 'object') {
    throw err('UH_INVALID', 'body: expected a JSON object or an array of objects');
  }
  const isArray = Array.isArray(body);
  if (isArray && (!def.batch || local)) {
    throw err(
      'UH_INVALID',
      local ? 'body: an array is not allowed in local scope' : 'body: an array is not allowed here',
    );
  }
  if (isArray && (body as unknown[]).length === 0) throw err('UH_INVALID', 'body: the array is empty');

  let raws: Record<string, unknown>[];
  if (isArray) {
    raws = (body as unknown[]).map((b, i) => {
      if (!b || typeof b !== 'object' || Array.isArray(b)) throw err('UH_INVALID', `entry ${i}: expected an object`);
      return { ...(b as Record<string, unknown>), ...qParams };
    });
    raws.push(...qTargets.map((t) => ({ ...t, ...qParams })));
  } else {
    const obj = { ...((body as Record<string, unknown> | undefined) ?? {}), ...qParams };
    const hasTarget = 'uuid' in obj || 'name' in obj;
    raws = qTargets.length > 0 && !hasTarget ? qTargets.map((t) => ({ ...t, ...obj })) : [obj];
    if (qTargets.length > 0 && hasTarget) raws.push(...qTargets.map((t) => ({ ...t, ...qParams })));
  }
  for (const [k, v] of Object.entries(pathParams)) {
    for (const r of raws) {
      if (k in r) throw err('UH_INVALID', `parameter '${k}' is given in the path; it must not be in the body`);
      r[k] = v;
    }
  }
  // Only targeting endpoints reserve uuid/name; others (autoscale policies) may take `name` as a parameter.
  if (local && def.target === 'required' && (qTargets.length > 0 || raws.some((r) => 'uuid' in r || 'name' in r))) {
    throw err('UH_INVALID', "'uuid' and 'name' are not allowed in local scope: the path names the object");
  }
  if (local && !UUID_RE.test(pathUuid)) throw err('UH_INVALID', `path: '${pathUuid}' is not a valid UUID`);

  const many = raws.length > 1 || isArray;
  const entries = raws.map((raw, i) => {
    validate(c, raw, many ? i : null);
    normalizeNames(c.entrySchema, raw);
    let target: Target | undefined;
    if (def.target === 'required') {
      const { uuid, name, ...rest } = raw as { uuid?: string; name?: string };
      if (local) target = { uuid: pathUuid!.toLowerCase() };
      else if (uuid !== undefined && name !== undefined) {
        throw err('UH_NOT_BOTH', `${many ? `entry ${i}: ` : ''}give either 'uuid' or 'name', not both`);
      } else if (uuid !== undefined) target = { uuid: uuid.toLowerCase() };
      else if (name !== undefined) target = { name };
      else if (!allowsNoTarget(def)) {
        throw err('UH_MISSING_ID', `${many ? `entry ${i}: ` : ''}'uuid' or 'name' is required`);
      }
      runCheck(def, rest, many ? i : null);
      return { target, params: rest, local, pathUuid };
    }
    runCheck(def, raw, many ? i : null);
    return { target, params: raw, local, pathUuid };
  });
  return { entries, query, batch: many };
}

/** Endpoints that cope with entries without target (lists, get-all, wait with ids). */
function allowsNoTarget(def: EndpointDef): boolean {
  return def.handleAll !== undefined || def.list !== undefined;
}

function validateQuery(schema: TObject, query: Record<string, unknown>): void {
  const check = queryChecks.get(schema) ?? TypeCompiler.Compile(schema);
  queryChecks.set(schema, check);
  if (check.Check(query)) return;
  const first = check.Errors(query).First();
  throw err('UH_INVALID', first ? `query ${describe(first.path, first.schema, first.value, first.message)}` : 'query');
}
const queryChecks = new WeakMap<TObject, TypeCheck<TObject>>();
