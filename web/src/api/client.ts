// The console's only way to the daemon: the public API through a client typed by the OpenAPI
// document (schema.d.ts is generated from docs/openapi.json by `npm run build:web`).
import createClient, { type Middleware } from 'openapi-fetch';
import type { paths } from './schema';

export type { paths };

const TOKEN_KEY = 'unihost.token';

/**
 * The token lives in sessionStorage (docs/security.md, "Web console"): sent only as the
 * Authorization header the API already takes, never in a URL or a cookie, gone with the tab.
 */
export const session = {
  token: (): string | null => sessionStorage.getItem(TOKEN_KEY),
  set: (t: string): void => sessionStorage.setItem(TOKEN_KEY, t),
  clear: (): void => sessionStorage.removeItem(TOKEN_KEY),
};

/** Raised for a refused call: `message` is the API's own words. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly http: number,
    readonly code?: number,
  ) {
    super(message);
  }
}

/** Listeners told when the API refuses the token (expired, revoked): the app returns to sign-in. */
const expired = new Set<() => void>();
export const onExpired = (fn: () => void): (() => void) => {
  expired.add(fn);
  return () => expired.delete(fn);
};

const auth: Middleware = {
  onRequest({ request }) {
    const t = session.token();
    if (t) request.headers.set('authorization', `Bearer ${t}`);
    return request;
  },
  onResponse({ response }) {
    if (response.status === 401 && session.token()) for (const fn of expired) fn();
    return response;
  },
};

export const api = createClient<paths>({ baseUrl: globalThis.location?.origin ?? '' });
api.use(auth);

interface Envelope {
  status?: string;
  message?: string;
  errors?: { message: string; error?: number }[];
  data?: unknown;
}
type Fetched<D> = { data?: D; error?: unknown; response: Response };
type ErrorEntry = { status: 'error'; message: string; error: number };
/** The entries of `data.<key>` in an answer's type, whatever the endpoint. */
type EntriesOf<D, K extends string> = D extends { data?: infer X }
  ? X extends { [P in K]?: (infer E)[] }
    ? E
    : never
  : never;
export type Ok<E> = Exclude<E, { status: 'error' }>;

function refusal(r: Fetched<unknown>): ApiError {
  const body = (r.error ?? r.data) as Envelope | undefined;
  const first = body?.errors?.[0];
  const message = body?.message ?? first?.message ?? `${r.response.status} ${r.response.statusText}`;
  return new ApiError(message, r.response.status, first?.error);
}

/** Every entry of a batch answer, failed ones included (bulk actions report each). */
export async function results<D, K extends string>(call: Promise<Fetched<D>>, key: K): Promise<EntriesOf<D, K>[]> {
  const r = await call;
  const body = r.data as Envelope | undefined;
  const list = (body?.data as Record<string, unknown[]> | undefined)?.[key];
  if (!r.response.ok && !list) throw refusal(r);
  if (!list) throw new ApiError(`the answer holds no '${key}'`, r.response.status);
  return list as EntriesOf<D, K>[];
}

/** The entries of a batch answer; the first failed entry is thrown in the API's words. */
export async function ok<D, K extends string>(call: Promise<Fetched<D>>, key: K): Promise<Ok<EntriesOf<D, K>>[]> {
  const r = await call;
  if (!r.response.ok) throw refusal(r);
  const list = await results(Promise.resolve(r), key);
  const bad = (list as unknown as (ErrorEntry | { status?: string })[]).find(
    (e): e is ErrorEntry => e.status === 'error',
  );
  if (bad) throw new ApiError(bad.message, r.response.status, bad.error);
  return list as Ok<EntriesOf<D, K>>[];
}

/** The one entry of a single-object answer. */
export async function one<D, K extends string>(call: Promise<Fetched<D>>, key: K): Promise<Ok<EntriesOf<D, K>>> {
  const [e] = await ok(call, key);
  if (!e) throw new ApiError('the answer is empty', 200);
  return e;
}

/** The full form of listed objects (the API's answer types also allow a short form that lacks `key`). */
export const full = <E, K extends PropertyKey>(list: E[], _key: K): Extract<E, Record<K, unknown>>[] =>
  list as Extract<E, Record<K, unknown>>[];

/** A readable message for anything thrown. */
export const messageOf = (e: unknown): string =>
  e instanceof ApiError ? e.message : e instanceof Error ? `${e.name}: ${e.message}` : String(e);
