import { chmodSync, mkdirSync } from 'node:fs';

/**
 * Whatever launched the daemon (a script, a unit file, a shell with umask
 * 022), the files it creates hold tenants' data (database, volume images,
 * console logs) and are for root only: the daemon and its children (QEMU,
 * mkfs) create files with mode 0600/0700, and the data dir of an existing
 * install is closed to others.
 */
export function restrictFileModes(dataDir: string): void {
  process.umask(0o077);
  mkdirSync(dataDir, { recursive: true });
  chmodSync(dataDir, 0o700);
}
