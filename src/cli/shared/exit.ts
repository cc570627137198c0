import { CommanderError } from 'commander';
import { ApiError, ClientConfigError, ConnectionError } from '../../client/errors.js';

/** Exit codes scripts can rely on (README, "Exit codes"). */
export const EXIT = {
  OK: 0,
  /** the API refused the request, or another failure */
  ERROR: 1,
  /** bad flags or arguments */
  USAGE: 2,
  /** a named object does not exist */
  NOT_FOUND: 3,
  /** no token, or the token was refused (401) */
  AUTH: 4,
  /** the metro could not be reached */
  UNREACHABLE: 5,
  /** a wait ended before the state was reached */
  TIMEOUT: 6,
} as const;

/** A mistake in the command line, found before anything was sent. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** A wait gave up (client side); exits with EXIT.TIMEOUT. */
export class TimeoutError extends Error {}

/** The exit code and the lines to print on stderr for an error. Never a stack trace. */
export function describeError(e: unknown): { code: number; lines: string[] } {
  if (e instanceof CommanderError) return { code: e.exitCode === 0 ? EXIT.OK : EXIT.USAGE, lines: [] };
  if (e instanceof UsageError) return { code: EXIT.USAGE, lines: [e.message] };
  if (e instanceof TimeoutError) return { code: EXIT.TIMEOUT, lines: [e.message] };
  if (e instanceof ClientConfigError) {
    return { code: /no token/.test(e.message) ? EXIT.AUTH : EXIT.USAGE, lines: [e.message] };
  }
  if (e instanceof ConnectionError) return { code: EXIT.UNREACHABLE, lines: [e.message] };
  if (e instanceof ApiError) {
    if (e.unauthorized)
      return {
        code: EXIT.AUTH,
        lines: [`the token was refused (HTTP 401: ${e.apiMessage}); check --token, UKC_TOKEN or the profile`],
      };
    const lines = e.failures.length > 0 ? e.failures.map((f) => f.message) : [e.apiMessage];
    const code = e.notFound ? EXIT.NOT_FOUND : e.timedOut ? EXIT.TIMEOUT : EXIT.ERROR;
    return { code, lines };
  }
  const msg = e instanceof Error ? e.message : String(e);
  return { code: EXIT.ERROR, lines: [msg.split('\n')[0]!] };
}
