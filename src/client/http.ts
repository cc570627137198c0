import { errors as undiciErrors, request } from 'undici';
import type { Connection } from './config.js';
import { ApiError, ConnectionError, type FailedEntry } from './errors.js';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
type Json = Record<string, unknown>;

export interface CallOptions {
  /** query parameters (GET parameters go here too) */
  query?: Json;
  /** JSON body: one object or a batch array */
  body?: Json | Json[];
  signal?: AbortSignal;
  /** the longest the server may take to answer (waits); default 5 minutes */
  replyTimeoutMs?: number;
}

interface Envelope {
  status?: string;
  message?: string;
  data?: Record<string, Json[]>;
  errors?: { status?: number; message?: string; error?: number }[];
}

const isScalar = (v: unknown) => typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean';

/** Query string the API reads: lists as repeated keys, booleans as true/false. */
export function queryString(q: Json): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined) continue;
    for (const x of Array.isArray(v) ? v : [v]) {
      if (!isScalar(x)) throw new TypeError(`query parameter '${k}' must be scalar`);
      p.append(k, String(x));
    }
  }
  const s = p.toString();
  return s === '' ? '' : `?${s}`;
}

/** The reason of a transport failure in a few words (the error code when there is one). */
export function transportReason(e: unknown): string {
  const x = e as { code?: string; cause?: { code?: string; message?: string }; message?: string };
  if (e instanceof undiciErrors.HeadersTimeoutError) return 'no reply in time';
  if (e instanceof undiciErrors.ConnectTimeoutError) return 'connection timed out';
  return x.cause?.code ?? x.code ?? x.cause?.message ?? x.message ?? String(e);
}

/**
 * Sends one request and returns the entries of `data[plural]`. Throws
 * ApiError when the reply is not a success (whole-request error, or any
 * failed entry) and ConnectionError when the metro cannot be reached.
 */
export async function call(
  conn: Connection,
  method: Method,
  path: string,
  plural: string,
  o: CallOptions = {},
): Promise<Json[]> {
  const url = conn.baseUrl + path + queryString(o.query ?? {});
  const headers: Record<string, string> = { authorization: `Bearer ${conn.token}`, accept: 'application/json' };
  let body: string | undefined;
  if (o.body !== undefined) {
    body = JSON.stringify(o.body);
    headers['content-type'] = 'application/json';
  }
  let status: number;
  let text: string;
  try {
    const r = await request(url, {
      method,
      headers,
      body,
      signal: o.signal,
      headersTimeout: o.replyTimeoutMs ?? 300_000,
    });
    status = r.statusCode;
    text = await r.body.text();
  } catch (e) {
    if (o.signal?.aborted) throw e;
    throw new ConnectionError(conn.baseUrl, transportReason(e));
  }
  return parseReply(status, text, plural);
}

export function parseReply(status: number, text: string, plural: string): Json[] {
  let env: Envelope;
  try {
    env = JSON.parse(text) as Envelope;
  } catch {
    throw new ApiError(status, `unexpected reply (HTTP ${status}): ${text.slice(0, 200).trim() || 'empty body'}`);
  }
  const entries = env.data?.[plural] ?? [];
  const failures = entries.filter((e) => e.status === 'error') as unknown as FailedEntry[];
  if (status >= 400 || (env.status === 'error' && failures.length === 0)) {
    const first = env.errors?.[0];
    const message = env.message ?? first?.message ?? `HTTP ${status}`;
    throw new ApiError(status, message, [], [], first?.error);
  }
  if (failures.length > 0) throw new ApiError(status, env.message ?? failures[0]!.message, failures, entries);
  return entries;
}
