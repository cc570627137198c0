import { err } from '../errors.js';

/** The highest soft or hard limit (the SDK's range; HAProxy takes it as a server's maxconn). */
export const MAX_LIMIT = 65_535;

/**
 * A service group's limits per instance together: each 1..65535 when set,
 * the soft one at most the hard one. `what` names them in the refusal.
 */
export function checkGroupLimits(soft: number | null, hard: number | null, what: string): void {
  for (const [k, v] of [
    ['soft_limit', soft],
    ['hard_limit', hard],
  ] as const)
    if (v !== null && (!Number.isInteger(v) || v < 1 || v > MAX_LIMIT))
      throw err('UH_INVALID', `${what}: ${k} must be a whole number from 1 to ${MAX_LIMIT}, not ${v}`);
  if (soft !== null && hard !== null && soft > hard)
    throw err(
      'UH_INVALID',
      `${what}: soft_limit ${soft} would be above hard_limit ${hard}; the soft limit is at most the hard one`,
    );
}
