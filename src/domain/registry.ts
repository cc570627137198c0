/**
 * The rules of the OCI registry (docs/registry.md): repository names and
 * who may read or write them, scopes of the token flow, and the errors of
 * the distribution spec.
 */

/** The distribution spec's error codes, with the HTTP status each answers with here. */
export const REGISTRY_ERRORS = {
  BLOB_UNKNOWN: 404,
  BLOB_UPLOAD_INVALID: 400,
  BLOB_UPLOAD_UNKNOWN: 404,
  DIGEST_INVALID: 400,
  MANIFEST_BLOB_UNKNOWN: 400,
  MANIFEST_INVALID: 400,
  MANIFEST_UNKNOWN: 404,
  NAME_INVALID: 400,
  NAME_UNKNOWN: 404,
  SIZE_INVALID: 400,
  UNAUTHORIZED: 401,
  DENIED: 403,
  UNSUPPORTED: 415,
  TOOMANYREQUESTS: 429,
  RANGE_INVALID: 416,
} as const;

export type RegistryCode = keyof typeof REGISTRY_ERRORS;

/** An error answered in the distribution spec's form: `{"errors":[{"code","message","detail"}]}`. */
export class RegistryError extends Error {
  readonly http: number;
  constructor(
    readonly code: RegistryCode,
    message: string,
    readonly detail?: unknown,
    http?: number,
  ) {
    super(message);
    this.http = http ?? REGISTRY_ERRORS[code];
  }
}

export const isRegistryError = (e: unknown): e is RegistryError => e instanceof RegistryError;

export const OFFICIAL_NAMESPACE = 'official';

const COMPONENT = /^[a-z0-9]+(?:[._-][a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
export const SHA256 = /^sha256:[0-9a-f]{64}$/;
/** Longest repository name accepted (the distribution spec lets registries bound it). */
const REPO_MAX = 255;

export interface Repo {
  /** `app` or `user/app`, as in URLs */
  name: string;
  /** `official` or the owning user's name */
  namespace: string;
  app: string;
}

/**
 * Parses a repository name: `app` (an official image) or `user/app` (a
 * user's). Lower case letters, digits and single separators only; deeper
 * paths are refused, since image references here have at most two parts.
 */
export function parseRepo(name: string): Repo {
  if (name.length > REPO_MAX) throw new RegistryError('NAME_INVALID', `repository name is longer than ${REPO_MAX}`);
  const parts = name.split('/');
  const bad = parts.find((p) => !COMPONENT.test(p));
  if (bad !== undefined) {
    throw new RegistryError(
      'NAME_INVALID',
      `repository name '${name}': '${bad}' is not a valid component (lower case letters and digits, ` +
        `separated by single '.', '_' or '-')`,
    );
  }
  if (parts.length > 2)
    throw new RegistryError('NAME_INVALID', `repository name '${name}': unihost repositories are 'app' or 'user/app'`);
  if (parts.length === 1) return { name, namespace: OFFICIAL_NAMESPACE, app: parts[0]! };
  if (parts[0] === OFFICIAL_NAMESPACE)
    throw new RegistryError('NAME_INVALID', `repository name '${name}': official images have no prefix`);
  return { name, namespace: parts[0]!, app: parts[1]! };
}

/** A manifest reference: a tag or a digest. */
export function parseReference(ref: string): { tag: string } | { digest: string } {
  if (ref.includes(':')) {
    if (!SHA256.test(ref)) {
      if (/^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$/.test(ref) && !ref.startsWith('sha256:'))
        throw new RegistryError('UNSUPPORTED', `digest algorithm of '${ref}' is not supported: only sha256 is`);
      throw new RegistryError('DIGEST_INVALID', `'${ref}' is not a sha256 digest`);
    }
    return { digest: ref };
  }
  if (!TAG.test(ref)) throw new RegistryError('MANIFEST_INVALID', `'${ref}' is not a valid tag`, undefined, 400);
  return { tag: ref };
}

/** Checks a digest given by a client (query parameter, mount source). */
export function checkDigest(d: string, what: string): string {
  if (SHA256.test(d)) return d;
  if (/^[a-z0-9]+(?:[+._-][a-z0-9]+)*:/.test(d) && !d.startsWith('sha256:'))
    throw new RegistryError('UNSUPPORTED', `${what} '${d.slice(0, 80)}': only sha256 digests are supported`);
  throw new RegistryError('DIGEST_INVALID', `${what} '${d.slice(0, 80)}' is not a sha256 digest`);
}

export type Action = 'pull' | 'push' | 'delete';

/** Who is asking: a user's name and whether it is an operator (developer) account. */
export interface Principal {
  name: string;
  operator: boolean;
}

/**
 * What a principal may do in a repository: read its own namespace and the
 * official images; write and delete only its own (official ones: operators).
 */
export function allowed(p: Principal, repo: Repo): Set<Action> {
  if (repo.namespace === p.name) return new Set(['pull', 'push', 'delete']);
  if (repo.namespace === OFFICIAL_NAMESPACE) return new Set<Action>(p.operator ? ['pull', 'push', 'delete'] : ['pull']);
  return new Set();
}

export interface Scope {
  repo: string;
  actions: Action[];
}

/**
 * Parses the token endpoint's `scope` values (`repository:alice/app:pull,push`,
 * space separated or repeated). Unknown resource types and actions are
 * dropped, as the token spec allows; a malformed repository name is an error.
 */
export function parseScopes(values: string[]): Scope[] {
  const out: Scope[] = [];
  for (const v of values.flatMap((s) => s.split(' ')).filter(Boolean)) {
    const first = v.indexOf(':');
    const last = v.lastIndexOf(':');
    if (first < 0 || last === first) throw new RegistryError('NAME_INVALID', `scope '${v.slice(0, 120)}' is malformed`);
    if (v.slice(0, first) !== 'repository') continue;
    const repo = v.slice(first + 1, last);
    parseRepo(repo);
    const actions = v
      .slice(last + 1)
      .split(',')
      .map((a) => (a === '*' ? ['pull', 'push', 'delete'] : [a]))
      .flat()
      .filter((a): a is Action => a === 'pull' || a === 'push' || a === 'delete');
    out.push({ repo, actions: [...new Set(actions)] });
  }
  return out;
}
