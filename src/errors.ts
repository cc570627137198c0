/**
 * One registry of coded errors. Each code has its HTTP status (used when the
 * error aborts a whole request) and its numeric API `error` code, the
 * public service's numbers (used in per-entry failures; docs/errors.md). Code never branches on
 * message text; it branches on `code`.
 */

/** Numeric per-entry `error` codes of the public service (docs/errors.md). */
export const ApiErrorNumber = {
  UnknownError: 0,
  NotSupported: 1,
  WrongMethod: 2,
  NoAPIEndpoint: 3,
  FailNotAll: 4,
  TooMany: 5,
  Unknown: 6,
  Invalid: 7,
  NotFound: 8,
  NoFree: 9,
  FailedOperation: 10,
  FailedWrongVMState: 11,
  TimedOut: 12,
  MissingID: 13,
  NotAllowed: 14,
  Attached: 15,
  MalformedRequest: 16,
  NotBoth: 17,
  AddService: 18,
  Quota: 19,
  GuestMemoryTooSmall: 20,
  NotAttached: 21,
  TooLong: 22,
  AlreadyExists: 23,
  CannotBeUsed: 24,
  AutoscaleInstance: 25,
  AutoscaleConfigured: 26,
  AutoscaleNotConfigured: 27,
  AutoscaleDisabled: 28,
  AutoscaleSizeOOR: 29,
  CertCNMisMatch: 30,
} as const;

interface CodeInfo {
  http: number;
  api: number;
  doc: string;
}

export const ERROR_CODES = {
  /** The bearer token is missing, malformed or unknown. */
  UH_UNAUTHORIZED: { http: 401, api: ApiErrorNumber.NotAllowed, doc: 'Missing or invalid bearer token.' },
  /** The body is not valid JSON. */
  UH_MALFORMED: { http: 400, api: ApiErrorNumber.MalformedRequest, doc: 'The request body is not valid JSON.' },
  /** A parameter is unknown, ill-typed or breaks a rule. */
  UH_INVALID: { http: 400, api: ApiErrorNumber.Invalid, doc: 'A parameter is unknown, ill-typed or invalid.' },
  /** A target gives neither `uuid` nor `name`. */
  UH_MISSING_ID: { http: 400, api: ApiErrorNumber.MissingID, doc: 'A target names neither uuid nor name.' },
  /** A target gives both `uuid` and `name`, or `ids` and a single target. */
  UH_NOT_BOTH: { http: 400, api: ApiErrorNumber.NotBoth, doc: 'A target names both uuid and name.' },
  /** The body exceeds the configured limit. */
  UH_TOO_LARGE: { http: 413, api: ApiErrorNumber.TooLong, doc: 'The request body is too large.' },
  /** Path or method do not name an endpoint. */
  UH_NO_ENDPOINT: { http: 404, api: ApiErrorNumber.NoAPIEndpoint, doc: 'No API endpoint for this method and path.' },
  /** The named object does not exist for this user. */
  UH_NOT_FOUND: { http: 404, api: ApiErrorNumber.NotFound, doc: 'The target object does not exist.' },
  /** The object name is taken within this user's category. */
  UH_EXISTS: { http: 409, api: ApiErrorNumber.AlreadyExists, doc: 'An object with that name already exists.' },
  /** A domain is used by another group (any user) or reserved. */
  UH_DOMAIN_TAKEN: { http: 409, api: ApiErrorNumber.CannotBeUsed, doc: 'The domain is in use or reserved.' },
  /** A quota (hard limit) would be exceeded. */
  UH_QUOTA: { http: 429, api: ApiErrorNumber.Quota, doc: 'A quota of the account would be exceeded.' },
  /** Too many requests (rate limit) or concurrent waits of one user. */
  UH_TOO_MANY: {
    http: 429,
    api: ApiErrorNumber.TooMany,
    doc: 'Too many requests per time, or too many concurrent waits, for this user.',
  },
  /** A value lies outside the account's min/max limits. */
  UH_LIMIT: { http: 400, api: ApiErrorNumber.Invalid, doc: 'A value lies outside the account limits.' },
  /** The requested memory is below what the image needs. */
  UH_MEMORY_TOO_SMALL: { http: 400, api: ApiErrorNumber.GuestMemoryTooSmall, doc: 'Too little memory for the image.' },
  /** The object is in a state that does not allow the operation. */
  UH_WRONG_STATE: { http: 409, api: ApiErrorNumber.FailedWrongVMState, doc: 'The object is in the wrong state.' },
  /** The object is still attached (volume, group with instances, certificate). */
  UH_ATTACHED: { http: 409, api: ApiErrorNumber.Attached, doc: 'The object is still attached.' },
  /** The object is not attached where the operation needs it. */
  UH_NOT_ATTACHED: { http: 409, api: ApiErrorNumber.NotAttached, doc: 'The object is not attached.' },
  /** The operation is not allowed for this object. */
  UH_NOT_ALLOWED: { http: 403, api: ApiErrorNumber.NotAllowed, doc: 'The operation is not allowed.' },
  /** A wait did not finish in time. */
  UH_TIMEOUT: { http: 408, api: ApiErrorNumber.TimedOut, doc: 'The wait timed out.' },
  /** Autoscale is already configured for the group. */
  UH_AUTOSCALE_CONFIGURED: {
    http: 409,
    api: ApiErrorNumber.AutoscaleConfigured,
    doc: 'Autoscale is already configured.',
  },
  /** Autoscale is not configured for the group. */
  UH_AUTOSCALE_NOT_CONFIGURED: {
    http: 404,
    api: ApiErrorNumber.AutoscaleNotConfigured,
    doc: 'Autoscale is not configured.',
  },
  /** Autoscale is disabled for this account (min and max autoscale size both 1). */
  UH_AUTOSCALE_DISABLED: { http: 403, api: ApiErrorNumber.AutoscaleDisabled, doc: 'Autoscale is disabled.' },
  /** Autoscale size outside the account limits. */
  UH_AUTOSCALE_SIZE: { http: 400, api: ApiErrorNumber.AutoscaleSizeOOR, doc: 'Autoscale size out of range.' },
  /** A certificate named for a domain does not cover it (common name mismatch). */
  UH_CERT_MISMATCH: {
    http: 409,
    api: ApiErrorNumber.CertCNMisMatch,
    doc: 'The certificate does not cover the domain.',
  },
  /** Starting would take the guests' RAM over the host's memory budget (all users together). */
  UH_HOST_FULL: {
    http: 503,
    api: ApiErrorNumber.NoFree,
    doc: 'The host has no memory left for another guest; try again after instances stop.',
  },
  /** No free resource (addresses, ports) is left. */
  UH_NO_FREE: { http: 503, api: ApiErrorNumber.NoFree, doc: 'No free resource is left.' },
  /** The object changed while the operation ran (a concurrent writer won); trying again sees the new state. */
  UH_CONFLICT: {
    http: 409,
    api: ApiErrorNumber.FailedOperation,
    doc: 'The object changed meanwhile (a concurrent change won); try again.',
  },
  /** The store (the database) cannot be reached now; nothing was changed. */
  UH_UNAVAILABLE: {
    http: 503,
    api: ApiErrorNumber.FailedOperation,
    doc: 'The platform cannot reach its database now; nothing was changed. Try again shortly.',
  },
  /** The operation failed on the host. */
  UH_FAILED: { http: 500, api: ApiErrorNumber.FailedOperation, doc: 'The operation failed.' },
  /** Feature not supported by this platform. */
  UH_NOT_SUPPORTED: { http: 400, api: ApiErrorNumber.NotSupported, doc: 'Not supported.' },
  /** A bug: never caused by client input. */
  UH_INTERNAL: { http: 500, api: ApiErrorNumber.UnknownError, doc: 'Internal error.' },
} as const satisfies Record<string, CodeInfo>;

export type ErrorCode = keyof typeof ERROR_CODES;

export class UnihostError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.code = code;
    this.name = 'UnihostError';
  }
  get http(): number {
    return ERROR_CODES[this.code].http;
  }
  get api(): number {
    return ERROR_CODES[this.code].api;
  }
}

/** Shorthand: `throw err('UH_NOT_FOUND', "No instance with name 'x'")`. */
export function err(code: ErrorCode, message: string): UnihostError {
  return new UnihostError(code, message);
}

export function isUnihostError(e: unknown): e is UnihostError {
  return e instanceof UnihostError;
}
