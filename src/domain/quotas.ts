import type { Config } from '../config.js';
import type { Hard, Limits, UserRec } from '../store/types.js';

/** Effective quotas of a user: defaults with the user's overrides. */
export function effectiveQuotas(config: Config, user: UserRec): { hard: Hard; limits: Limits } {
  return {
    hard: { ...config.defaultQuotas.hard, ...user.quotas.hard },
    limits: { ...config.defaultQuotas.limits, ...user.quotas.limits },
  };
}
