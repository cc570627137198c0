/**
 * fast-check arbitraries generated from the endpoint table's TypeBox schemas:
 * values that pass the schema (`valid`), and adversarial ones (wrong types,
 * unknown keys, huge strings, deep nesting, unicode, NUL bytes, numbers at
 * the edges) used to mutate them.
 */
import fc from 'fast-check';
import { Kind, type TSchema } from '@sinclair/typebox';
import { NAME_FORMAT, POLICY_NAME_FORMAT } from '../../src/api/schemas/common.js';

/** Identifiers and values of real objects, so valid requests reach the handlers' real paths too. */
export interface Known {
  uuids: string[];
  names: string[];
  strings: string[];
}

const NAME_RE = /^[a-z][a-z0-9-]{0,14}[a-z0-9]$/;

/** Numbers at the edges of every integer type a parser or a database might use. */
export const EDGE_NUMBERS = [
  0,
  -0,
  -1,
  1,
  0.5,
  -1.5,
  2 ** 31 - 1,
  2 ** 31,
  -(2 ** 31) - 1,
  2 ** 32,
  2 ** 53,
  -(2 ** 53),
  2 ** 63,
  1e308,
  -1e308,
  5e-324,
  Number.MAX_SAFE_INTEGER + 2,
];

const deep = (depth: number, leaf: unknown, asArray: boolean): unknown => {
  let v = leaf;
  for (let i = 0; i < depth; i++) v = asArray ? [v] : { a: v };
  return v;
};

/** Any value, weighted towards the ones that break parsers and validators. */
export function adversarial(): fc.Arbitrary<unknown> {
  return fc.oneof(
    fc.anything({ maxDepth: 3 }),
    fc.constantFrom(...EDGE_NUMBERS),
    fc.string({ unit: 'grapheme', maxLength: 40 }),
    fc.string({ unit: 'binary', maxLength: 40 }),
    fc.constantFrom('\u0000', 'a\u0000b', '\u202e', '\ud83d\ude00', 'e\u0301', '../../etc/passwd', '\'"`;--', '%00'),
    fc.integer({ min: 1000, max: 300_000 }).map((n) => 'x'.repeat(n)),
    fc.integer({ min: 20, max: 200 }).chain((d) => fc.boolean().map((a) => deep(d, 1, a))),
    fc.constantFrom(null, true, false, [], {}, [{}], [[]], ''),
  );
}

/** A value the schema accepts (`known` values mixed in for strings). */
export function valid(schema: TSchema, known: Known): fc.Arbitrary<unknown> {
  if (schema.anyOf) return fc.oneof(...(schema.anyOf as TSchema[]).map((s) => valid(s, known)));
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (schema.enum) return fc.constantFrom(...(schema.enum as unknown[]));
  switch (schema.type) {
    case 'string':
      return str(schema, known);
    case 'integer':
    case 'number': {
      const min = Math.max(schema.minimum ?? -(2 ** 31), schema.exclusiveMinimum ?? -Infinity);
      const max = Math.min(schema.maximum ?? 2 ** 31, schema.exclusiveMaximum ?? Infinity);
      const small = fc.integer({ min: Math.max(min, -2), max: Math.min(max, Math.max(min, -2) + 64) });
      return fc.oneof(small, fc.integer({ min: Math.ceil(min), max: Math.floor(max) }));
    }
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array':
      return fc.array(valid(schema.items as TSchema, known), {
        minLength: schema.minItems ?? 0,
        maxLength: Math.max(schema.minItems ?? 0, Math.min(schema.maxItems ?? 3, 3)),
      });
    case 'object':
      return object(schema, known);
  }
  if (schema[Kind] === 'Any' || schema[Kind] === 'Unknown') return fc.anything({ maxDepth: 2 });
  throw new Error(`fuzz: no generator for schema ${JSON.stringify(schema)}`);
}

function str(schema: TSchema, known: Known): fc.Arbitrary<string> {
  if (schema.format === 'uuid') return fc.oneof(fc.uuid(), fc.constantFrom(...known.uuids));
  if (schema.format === NAME_FORMAT || schema.format === POLICY_NAME_FORMAT)
    return fc.oneof(fc.stringMatching(NAME_RE), fc.constantFrom(...known.names));
  if (schema.pattern) return fc.stringMatching(new RegExp(schema.pattern as string));
  const plain = fc.string({ minLength: schema.minLength ?? 0, maxLength: Math.min(schema.maxLength ?? 20, 20) });
  const fits = (s: string) => s.length >= (schema.minLength ?? 0) && s.length <= (schema.maxLength ?? Infinity);
  return fc.oneof(plain, fc.constantFrom(...known.strings).filter(fits));
}

function object(schema: TSchema, known: Known): fc.Arbitrary<Record<string, unknown>> {
  const props = (schema.properties ?? {}) as Record<string, TSchema>;
  const required = new Set<string>((schema.required as string[] | undefined) ?? []);
  if (schema.patternProperties) {
    const [pattern, value] = Object.entries(schema.patternProperties as Record<string, TSchema>)[0]!;
    return fc.dictionary(fc.stringMatching(new RegExp(pattern)), valid(value, known), { maxKeys: 3 });
  }
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [k, s] of Object.entries(props)) model[k] = valid(s, known);
  return fc.record(model, { requiredKeys: Object.keys(props).filter((k) => required.has(k)) });
}

/** JSON text nested far deeper than any parameter (built as text: generating the value would overflow the stack). */
export function deepJson(): fc.Arbitrary<string> {
  return fc.tuple(fc.integer({ min: 1000, max: 100_000 }), fc.boolean(), fc.boolean()).map(([d, asArray, inParam]) => {
    const inner = asArray ? '['.repeat(d) + '1' + ']'.repeat(d) : '{"a":'.repeat(d) + '1' + '}'.repeat(d);
    return inParam ? `{"name":${inner}}` : inner;
  });
}

/** Replaces, removes or adds one key somewhere in `value` (objects and arrays, walked at random). */
export function mutate(value: unknown): fc.Arbitrary<unknown> {
  return fc
    .tuple(fc.nat(), fc.constantFrom('replace', 'remove', 'unknown', 'wrap'), adversarial())
    .map(([pick, how, bad]) => {
      const copy = structuredClone(value);
      const slots: [Record<string, unknown> | unknown[], string | number][] = [];
      const walk = (v: unknown) => {
        if (!v || typeof v !== 'object') return;
        for (const [k, x] of Object.entries(v)) {
          slots.push(Array.isArray(v) ? [v, Number(k)] : [v as Record<string, unknown>, k]);
          walk(x);
        }
      };
      walk(copy);
      if (how === 'wrap') return [copy];
      if (how === 'unknown' || slots.length === 0) {
        if (copy && typeof copy === 'object' && !Array.isArray(copy))
          (copy as Record<string, unknown>).zz_unknown = bad;
        else return bad;
        return copy;
      }
      const [holder, key] = slots[pick % slots.length]!;
      if (how === 'remove' && !Array.isArray(holder)) delete (holder as Record<string, unknown>)[key as string];
      else (holder as Record<string | number, unknown>)[key] = bad;
      return copy;
    });
}

/**
 * Timeouts are parameters like any other, but a valid large one makes the
 * request block for that long: keep them short wherever they appear.
 */
export function shortTimeouts(v: unknown, depth = 0): unknown {
  // parameters lie a few levels deep at most; deeper is adversarial nesting, left as it is
  if (!v || typeof v !== 'object' || depth > 8) return v;
  if (Array.isArray(v)) return v.map((x) => shortTimeouts(x, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    const isTimeout = /timeout/.test(k) && typeof x === 'number';
    out[k] = isTimeout && (x < 0 || x > 50) ? (k.endsWith('_s') ? 0 : 20) : shortTimeouts(x, depth + 1);
  }
  return out;
}
