import { chmod, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { KeyPair } from '../gateway/types.js';

/**
 * Certificate chains and private keys on disk, one directory per certificate
 * under `<data dir>/certs` (0700): `chain.pem` and `key.pem` (0600). Keys
 * never go into the database, answers or logs. Writes are atomic (rename),
 * so a renewal replaces the pair in one step.
 */
export class CertFiles {
  constructor(readonly dir: string) {}

  private path(id: string, f: 'chain.pem' | 'key.pem'): string {
    if (!/^[0-9a-f-]{36}$/.test(id)) throw new Error(`bad certificate id ${id}`);
    return join(this.dir, id, f);
  }

  async write(id: string, pair: KeyPair): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    await chmod(this.dir, 0o700);
    await mkdir(join(this.dir, id), { recursive: true, mode: 0o700 });
    // key first: a reader that sees the new chain also sees its key
    for (const [f, text] of [
      ['key.pem', pair.key],
      ['chain.pem', pair.cert],
    ] as const) {
      const p = this.path(id, f);
      await writeFile(`${p}.tmp`, text, { mode: 0o600 });
      await rename(`${p}.tmp`, p);
    }
  }

  /** The pair of a certificate, or undefined when it has none (yet). */
  async read(id: string): Promise<KeyPair | undefined> {
    try {
      const [cert, key] = await Promise.all([
        readFile(this.path(id, 'chain.pem'), 'utf8'),
        readFile(this.path(id, 'key.pem'), 'utf8'),
      ]);
      return { cert, key };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw e;
    }
  }

  async remove(id: string): Promise<void> {
    this.path(id, 'key.pem'); // refuses a bad id before rm sees it
    await rm(join(this.dir, id), { recursive: true, force: true });
  }
}
