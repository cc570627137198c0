/**
 * Updates in the newer API's form (`PATCH`, docs/api.md "Updates"): one
 * property, one operation (`set`, `add`, `del`), a value. These apply an
 * operation to a value of each shape, and say in words what is wrong with
 * one that does not fit.
 */
import { err } from '../errors.js';

export type UpdateOp = 'set' | 'add' | 'del';

export interface UpdateIn {
  prop: string;
  op: UpdateOp;
  value?: unknown;
  /** the client's id for this update, echoed in its answer */
  id?: string;
}

const at = (prop: string) => `update of '${prop}'`;

/** `op` must be one of `ops` for this property. */
export function onlyOps(u: UpdateIn, ops: readonly UpdateOp[]): void {
  if (!ops.includes(u.op))
    throw err('UH_INVALID', `${at(u.prop)}: operation '${u.op}' is not allowed (allowed: ${ops.join(', ')})`);
}

function strings(prop: string, v: unknown): string[] {
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || !list.every((x) => typeof x === 'string'))
    throw err('UH_INVALID', `${at(prop)}: the value must be a string or an array of strings`);
  return list as string[];
}

/** A list of strings: `set` replaces, `add` appends what is not there yet, `del` removes. */
export function applyList(cur: readonly string[], u: UpdateIn): string[] {
  const v = strings(u.prop, u.value);
  if (u.op === 'set') return [...new Set(v)];
  if (u.op === 'add') return [...new Set([...cur, ...v])];
  const gone = new Set(v);
  return cur.filter((x) => !gone.has(x));
}

/** A map of strings: `set` replaces, `add` merges, `del` removes the keys named (a string or an array). */
export function applyMap(cur: Readonly<Record<string, string>>, u: UpdateIn): Record<string, string> {
  if (u.op === 'del') {
    const out = { ...cur };
    for (const k of strings(u.prop, u.value)) delete out[k];
    return out;
  }
  const v = u.value;
  if (!v || typeof v !== 'object' || Array.isArray(v) || !Object.values(v).every((x) => typeof x === 'string'))
    throw err('UH_INVALID', `${at(u.prop)}: the value must be an object of strings`);
  return u.op === 'set' ? { ...(v as Record<string, string>) } : { ...cur, ...(v as Record<string, string>) };
}

/** A whole number in [min, max] (`set` only). */
export function setInt(u: UpdateIn, min: number, max: number): number {
  onlyOps(u, ['set']);
  const v = u.value;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
    throw err('UH_INVALID', `${at(u.prop)}: the value must be a whole number from ${min} to ${max}`);
  return v;
}

/** A boolean (`set` only). */
export function setBool(u: UpdateIn): boolean {
  onlyOps(u, ['set']);
  if (typeof u.value !== 'boolean') throw err('UH_INVALID', `${at(u.prop)}: the value must be true or false`);
  return u.value;
}

/** A guest hostname: one DNS label (RFC 1123). */
export function checkHostname(u: UpdateIn): string | null {
  if (u.op === 'del') return null;
  onlyOps(u, ['set', 'del']);
  const v = u.value;
  if (typeof v !== 'string' || !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/i.test(v))
    throw err(
      'UH_INVALID',
      `${at(u.prop)}: the value must be one DNS label (letters, digits, hyphens; 1-63 characters)`,
    );
  return v.toLowerCase();
}

/** A property the platform does not offer: a per-entry refusal naming it and why. */
export function unsupported(prop: string, why: string): never {
  throw err('UH_NOT_SUPPORTED', `${at(prop)}: not supported on this platform (${why})`);
}
