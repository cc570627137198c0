/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the checks test their shape. */
import type { Reply } from './harness.js';

/** One generated request, as sent. */
export interface Sent {
  endpoint: string;
  method: string;
  path: string;
  body: string | undefined;
  contentType: string | undefined;
  auth:
    | { kind: 'valid' }
    | { kind: 'bad'; suffix: string }
    | { kind: 'bad'; header: string | null }
    | { kind: 'bad'; truncate: number };
}

/** Messages that say something failed without saying what. */
const GENERIC = /^(internal error|invalid body|bad request|error|invalid|query|failed|unknown error)\.?$/i;
/** A clear message names a parameter or object ('x'), or says which part of the request is wrong. */
const NAMES_PROBLEM =
  /'[^']+'|"[^"]+"|\b[a-z_]+\[\d+\]|\b[a-z]+(_[a-z]+)+\b|\b(body|path|query|entry|JSON|token|endpoint|rate limit|quota|too large|expected|allowed|port \d+)\b/i;

function messageProblem(message: unknown, where: string): string | null {
  if (typeof message !== 'string' || message.length === 0) return `${where}: no message`;
  if (GENERIC.test(message.trim())) return `${where}: generic message '${message}'`;
  if (!NAMES_PROBLEM.test(message)) return `${where}: message names no parameter or reason: '${message}'`;
  return null;
}

/** The properties every answer must have (issue 14); returns what is wrong with `r`. */
export function checkReply(req: Sent, r: Reply): string[] {
  const out: string[] = [];
  if (r.status >= 500) out.push(`answer ${r.status}`);
  const b = r.body as any;
  if (!b || typeof b !== 'object') return [...out, `answer ${r.status} is not a JSON object`];
  // a request the HTTP layer cannot route (too long, undecodable path) fails before authentication
  const beforeAuth = r.status === 431 || String(b.message).startsWith("path '");
  if (req.auth.kind === 'bad' && r.status !== 401 && !beforeAuth)
    out.push(`a bad authorization header got ${r.status}`);
  if (typeof b.op_time_us !== 'number') out.push('no op_time_us');
  if (r.status >= 400) {
    if (b.status !== 'error') out.push(`answer ${r.status} with status '${b.status}'`);
    const e = Array.isArray(b.errors) && b.errors.length === 1 ? b.errors[0] : null;
    if (!e) out.push('error answer without one entry in errors');
    else if (e.status !== r.status || typeof e.error !== 'number' || e.message !== b.message)
      out.push(`errors[0] does not match the answer: ${JSON.stringify(e)}`);
    const m = messageProblem(b.message, 'error');
    if (m) out.push(m);
    return out;
  }
  if (!['success', 'partial_success', 'error'].includes(b.status)) out.push(`status '${b.status}'`);
  // with several entries, the top-level message only counts failures; each entry names its problem
  if (b.status !== 'success' && !/^(all )?\d+ (of \d+ )?operations failed$/.test(b.message)) {
    const m = messageProblem(b.message, 'per-entry failure');
    if (m) out.push(m);
  }
  const arrays = b.data && typeof b.data === 'object' ? Object.values(b.data) : [];
  for (const entries of arrays) {
    if (!Array.isArray(entries)) continue;
    for (const e of entries as any[]) {
      if (e?.status !== 'error') continue;
      if (e.error === 0 || e.message === 'internal error') out.push(`entry failed with an internal error`);
      const m = messageProblem(e.message, 'entry');
      if (m) out.push(m);
    }
  }
  return out;
}
