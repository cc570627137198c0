import type { RestartPolicy } from '../store/types.js';

/** Restarts in a sequence get delays: immediate, 5 s, 10 s, 20 s, 40 s ... capped at 5 min (the API spec's restart policy). */
export const BACKOFF_BASE_MS = 5_000;
export const BACKOFF_MAX_MS = 300_000;
/** Running this long without problems ends a restart sequence. */
export const HEALTHY_AFTER_MS = 10_000;

/** Delay before restart number `attempt + 1` of a sequence (`attempt` restarts already made). */
export function backoffMs(attempt: number): number {
  if (attempt <= 0) return 0;
  return Math.min(BACKOFF_BASE_MS * 2 ** (attempt - 1), BACKOFF_MAX_MS);
}

/**
 * Whether a stop leads to a restart: only stops initiated from inside the
 * instance (application exit or crash) count; `on-failure` restarts on a
 * crash or a non-zero exit code (docs/machines.md).
 */
export function shouldRestart(
  policy: RestartPolicy,
  initiator: 'none' | 'user' | 'platform',
  failed: boolean,
): boolean {
  if (initiator !== 'none') return false;
  if (policy === 'always') return true;
  if (policy === 'on-failure') return failed;
  return false;
}
