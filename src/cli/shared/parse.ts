import { UsageError } from './exit.js';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A duration such as `500ms`, `30s`, `2m`, `1h` (a bare number is seconds) in milliseconds. */
export function durationMs(flag: string, v: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(v.trim());
  if (!m) throw new UsageError(`${flag} must be a duration like 500ms, 30s, 2m or 1h, not '${v}'`);
  return Math.round(Number(m[1]) * UNITS[m[2] ?? 's']!);
}

export function positiveInt(flag: string, v: string, min = 1): number {
  if (!/^\d+$/.test(v) || Number(v) < min) throw new UsageError(`${flag} must be a whole number >= ${min}, not '${v}'`);
  return Number(v);
}

/** `KEY=VALUE` pairs into an object. */
export function keyValues(flag: string, pairs: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const eq = p.indexOf('=');
    if (eq <= 0) throw new UsageError(`${flag} '${p}' is not KEY=VALUE`);
    out[p.slice(0, eq)] = p.slice(eq + 1);
  }
  return out;
}

/** For repeatable options. */
export const collect = (v: string, acc: string[]): string[] => [...acc, v];

export interface ServiceIn {
  port: number;
  destination_port?: number;
  handlers?: string[];
}

const HANDLERS = ['tls', 'http', 'redirect'];

/** Handlers a port gets when none are given, following the spec's port rules. */
function defaultHandlers(port: number): string[] {
  if (port === 443) return ['tls', 'http'];
  if (port === 80) return ['http', 'redirect'];
  return ['tls'];
}

/**
 * A published port in kraft's syntax: `PORT[:DEST][/HANDLER+HANDLER]`, e.g.
 * `443:8080`, `443:8080/tls+http`, `80:443/http+redirect`.
 */
export function portSpec(v: string): ServiceIn {
  const m = /^(\d{1,5})(?::(\d{1,5}))?(?:\/([a-z+]+))?$/.exec(v);
  if (!m) throw new UsageError(`--port '${v}' is not PORT[:DEST][/HANDLER+...] (e.g. 443:8080/tls+http)`);
  const port = Number(m[1]);
  const handlers = m[3] ? m[3].split('+') : defaultHandlers(port);
  const bad = handlers.find((h) => !HANDLERS.includes(h));
  if (bad) throw new UsageError(`--port '${v}': unknown handler '${bad}' (known: ${HANDLERS.join(', ')})`);
  const out: ServiceIn = { port, handlers };
  if (m[2] !== undefined) out.destination_port = Number(m[2]);
  return out;
}

export function portText(s: { port: number; destination_port?: number; handlers?: string[] }): string {
  const dest = s.destination_port !== undefined && s.destination_port !== s.port ? `:${s.destination_port}` : '';
  return `${s.port}${dest}${s.handlers && s.handlers.length > 0 ? `/${s.handlers.join('+')}` : ''}`;
}

/**
 * One update in the CLI's form: `PROP=VALUE` (set), `PROP+=VALUE` (add),
 * `PROP-=VALUE` (del; `PROP-=` alone removes the property). A value that
 * reads as JSON (a number, true/false, an array or object, a quoted string)
 * is sent as that; anything else as a string.
 */
export function updateSpec(v: string): { prop: string; op: 'set' | 'add' | 'del'; value?: unknown } {
  const m = /^([a-z_]+)(\+=|-=|=)(.*)$/s.exec(v);
  if (!m) throw new UsageError(`'${v}' is not PROP=VALUE, PROP+=VALUE or PROP-=VALUE (e.g. memory_mb=256, tags+=blue)`);
  const op = m[2] === '+=' ? 'add' : m[2] === '-=' ? 'del' : 'set';
  const raw = m[3]!;
  if (op === 'del' && raw === '') return { prop: m[1]!, op };
  let value: unknown = raw;
  try {
    value = JSON.parse(raw);
  } catch {
    // not JSON: the word itself
  }
  return { prop: m[1]!, op, value };
}
