import { join } from 'node:path';

/** Where the daemon keeps files in its data dir. */
export interface Paths {
  db: string;
  images: string;
  instance(id: string): string;
  /** the ext4 images of volumes (src/volumes/ext4.ts) */
  volumes: string;
  /** certificate chains and keys (src/certs/files.ts) */
  certs: string;
  /** ACME account key and state */
  acme: string;
  /** QEMUs started in advance for restores (src/machines/qemu/warm.ts) */
  warm: string;
}

export function pathsFor(dataDir: string): Paths {
  return {
    db: join(dataDir, 'unihost.db'),
    images: join(dataDir, 'images'),
    instance: (id) => join(dataDir, 'instances', id),
    volumes: join(dataDir, 'volumes'),
    certs: join(dataDir, 'certs'),
    acme: join(dataDir, 'acme'),
    warm: join(dataDir, 'warm'),
  };
}
