import YAML from 'yaml';
import { UsageError } from './exit.js';

export const FORMATS = ['table', 'json', 'yaml'] as const;
export type Format = (typeof FORMATS)[number];

export function parseFormat(v: string | undefined): Format {
  const f = v ?? 'table';
  if (!(FORMATS as readonly string[]).includes(f))
    throw new UsageError(`-o must be one of ${FORMATS.join(', ')}, not '${f}'`);
  return f as Format;
}

/** Formats rows as columns separated by two spaces (the first row is the header). */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n');
}

/** Machine formats print the API's objects as they are; `table` prints what `human` makes of them. */
export function render(format: Format, data: unknown, human: () => string): string {
  if (format === 'json') return JSON.stringify(data, null, 2);
  if (format === 'yaml') return YAML.stringify(data).trimEnd();
  return human();
}

export interface Column<T> {
  header: string;
  value: (x: T) => string;
}

/** A list as a table; `none` when it is empty. */
export function listTable<T>(items: T[], cols: Column<T>[], none: string): string {
  if (items.length === 0) return none;
  return table([cols.map((c) => c.header), ...items.map((x) => cols.map((c) => c.value(x)))]);
}

/** One value in a cell: scalars as they are, the rest as compact YAML flow. */
export function cell(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v) && v.length === 0) return '';
  return YAML.stringify(v, { collectionStyle: 'flow' }).trim();
}

/** One object as `key  value` lines (keys upper-cased like table headers). */
export function details(obj: Record<string, unknown>, keys?: string[]): string {
  const ks = keys ?? Object.keys(obj);
  const rows = ks.filter((k) => obj[k] !== undefined && k !== 'status').map((k) => [`${k}:`, cell(obj[k])]);
  return rows.length === 0 ? '' : table(rows);
}

/** "3m ago" style age of an ISO time relative to now. */
export function age(iso: string | undefined, now = Date.now()): string {
  if (!iso) return '';
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function shortDigest(d: string): string {
  return d.startsWith('sha256:') ? d.slice(0, 19) : d;
}
