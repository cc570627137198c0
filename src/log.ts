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
  }) as pino.DestinationStream;
}
