import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import pino from 'pino';
import type { Config } from './config.js';

/**
 * Where the daemon logs: stdout, or a file that pino-roll rolls by size in
 * a worker thread (`<file>` becomes `<name>.1.log`, `<name>.2.log`, ...; a
 * `current.log` link beside them names the one written now). The oldest
 * go past `keep`.
 */
export function logDestination(o: Config['log']): pino.DestinationStream | undefined {
  if (!o.file) return undefined;
  // made here: pino-roll's `mkdir` comes after it links current.log
  mkdirSync(dirname(o.file), { recursive: true, mode: 0o700 });
  return pino.transport({
    target: 'pino-roll',
    options: {
      file: o.file,
      size: `${o.maxSizeMb}m`,
      limit: { count: o.keep, removeOtherLogFiles: true },
      symlink: true,
    },
    // The worker runs pino-roll's plain JavaScript: it needs none of the
    // parent's flags. Inheriting a loader (`--import tsx` in tests and dev
    // runs) gives each worker its own module-hooks thread, and on Node 20
    // that start can stall; a fresh-clone CI run once hung in the log test
    // until its 15-minute timeout with no bounded wait of its own firing.
    worker: { execArgv: [] },
  }) as pino.DestinationStream;
}
