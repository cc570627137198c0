import type { Logger } from 'pino';
import type { Controller } from './daemon.js';
import type { Services } from './services/index.js';

/** The background controllers the daemon runs by default. */
export function defaultControllers(_s: Services, _log: Logger): Controller[] {
  return [];
}
