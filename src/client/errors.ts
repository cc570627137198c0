/**
 * Typed errors of the API client. Callers branch on the class and on the
 * fields (HTTP status, per-entry `error` codes), never on message text.
 */

/** Numeric per-entry `error` codes the client treats specially (the public service's numbers, src/errors.ts). */
export const API_NOT_FOUND = 8;
export const API_TIMED_OUT = 12;

/** One failed entry of a reply: the target as given, the message and the numeric code. */
export interface FailedEntry {
  status: 'error';
  uuid?: string;
  name?: string;
  message: string;
  error?: number;
}

/** The API refused the request (non-2xx), or some or all of its entries failed. */
export class ApiError extends Error {
  constructor(
    /** HTTP status of the reply (200 when only entries failed) */
    readonly status: number,
    /** the reply's top-level message, or the first entry's */
    readonly apiMessage: string,
    /** failed entries, with their numeric `error` codes */
    readonly failures: FailedEntry[] = [],
    /** every entry of the reply, successes included (partial success) */
    readonly entries: Record<string, unknown>[] = [],
    /** the whole-request `error` code, when the reply had one */
    readonly code?: number,
  ) {
    super(failures.length > 0 ? failures.map((f) => f.message).join('; ') : apiMessage);
    this.name = 'ApiError';
  }

  /** true when the request failed because its target(s) do not exist */
  get notFound(): boolean {
    if (this.failures.length > 0) return this.failures.every((f) => f.error === API_NOT_FOUND);
    return this.code === API_NOT_FOUND;
  }

  get unauthorized(): boolean {
    return this.status === 401;
  }

  get timedOut(): boolean {
    return this.failures.length > 0 && this.failures.every((f) => f.error === API_TIMED_OUT);
  }
}

/** The metro could not be reached (connection refused, DNS failure, timeout). */
export class ConnectionError extends Error {
  constructor(
    readonly baseUrl: string,
    readonly reason: string,
  ) {
    super(`cannot reach ${baseUrl}: ${reason}`);
    this.name = 'ConnectionError';
  }
}

/** The client is not configured (no token, bad metro URL, broken profile file). */
export class ClientConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ClientConfigError';
  }
}
