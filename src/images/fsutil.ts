import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';

/** fsync a directory so a rename inside it survives a crash. */
export async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** A name for a temp file or dir next to its final place (same file system, so rename is atomic). */
export const tempName = (dir: string, prefix: string): string =>
  join(dir, `.${prefix}-${randomBytes(6).toString('hex')}`);

/** Writes a file crash-safely: temp file, fsync, rename over the target, fsync the directory. */
export async function atomicWrite(path: string, data: string | Buffer): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true });
  const tmp = tempName(dir, 'tmp');
  const fh = await open(tmp, 'w', 0o644);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  await syncDir(dir);
}

export async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw e;
  }
}
