import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, readFile, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { err } from '../errors.js';
import { atomicWrite, exists, syncDir, tempName } from './fsutil.js';
import { DIGEST_RE, MT, type Descriptor, type Index } from './oci.js';
import pLimit from 'p-limit';

const LOCK_STALE_MS = 30_000;
const LOCK_WAIT_MS = 10_000;
const TMP_MAX_AGE_MS = 24 * 3600_000;

export interface BlobRef {
  digest: string;
  size: number;
}

/**
 * An OCI image layout on disk (`oci-layout`, `index.json`, `blobs/sha256/`),
 * the image store of one daemon. Blobs are content-addressed and written
 * crash-safely (temp file, fsync, rename), so a blob present under its
 * digest is always complete. `index.json` lists every manifest once, by
 * digest; which tags point where lives in the store (the source of truth).
 * Nothing is ever garbage-collected: instances stay pinned to old digests.
 */
export class ImageLayout {
  readonly blobs: string;
  readonly tmp: string;
  readonly unpacked: string;
  /** index changes of this process, one at a time (the lock file orders processes) */
  private readonly inProcess = pLimit(1);

  constructor(readonly root: string) {
    this.blobs = join(root, 'blobs', 'sha256');
    this.tmp = join(root, 'tmp');
    this.unpacked = join(root, 'unpacked');
  }

  /** Creates the layout if missing and removes temp files that a crash left behind. May be called any time. */
  async init(): Promise<this> {
    await mkdir(this.blobs, { recursive: true });
    await mkdir(this.tmp, { recursive: true });
    await mkdir(this.unpacked, { recursive: true });
    const marker = join(this.root, 'oci-layout');
    if (!(await exists(marker))) await atomicWrite(marker, JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    const index = join(this.root, 'index.json');
    if (!(await exists(index)))
      await atomicWrite(index, JSON.stringify({ schemaVersion: 2, mediaType: MT.index, manifests: [] }));
    // Another process may be importing right now: only old leftovers go.
    for (const name of await readdir(this.tmp)) {
      const p = join(this.tmp, name);
      const st = await stat(p).catch(() => undefined);
      if (st && Date.now() - st.mtimeMs > TMP_MAX_AGE_MS) await rm(p, { recursive: true, force: true });
    }
    return this;
  }

  blobPath(digest: string): string {
    if (!DIGEST_RE.test(digest)) throw err('UH_INVALID', `'${digest}' is not a sha256 digest`);
    return join(this.blobs, digest.slice('sha256:'.length));
  }

  hasBlob(digest: string): Promise<boolean> {
    return exists(this.blobPath(digest));
  }

  /**
   * Stores what `write` produces as a blob, hashing while writing. With
   * `expected`, content that does not hash to it is rejected (corrupt input)
   * and nothing is stored.
   */
  async putStream(write: (out: Writable) => Promise<void>, expected?: BlobRef): Promise<BlobRef> {
    const tmp = tempName(this.tmp, 'blob');
    const fh = await open(tmp, 'w', 0o644);
    const hash = createHash('sha256');
    let size = 0;
    const out = new Writable({
      write(chunk: Buffer, _enc, cb) {
        hash.update(chunk);
        size += chunk.length;
        fh.write(chunk).then(() => cb(), cb);
      },
    });
    try {
      await write(out);
      await new Promise<void>((resolve, reject) => out.end((e?: Error | null) => (e ? reject(e) : resolve())));
      await fh.sync();
    } catch (e) {
      await fh.close();
      await rm(tmp, { force: true });
      throw e;
    }
    await fh.close();
    const got: BlobRef = { digest: `sha256:${hash.digest('hex')}`, size };
    if (expected && (got.digest !== expected.digest || got.size !== expected.size)) {
      await rm(tmp, { force: true });
      throw err(
        'UH_INVALID',
        `corrupt blob ${expected.digest}: its content (${got.size} bytes) hashes to ${got.digest}` +
          (got.size !== expected.size ? `, and its descriptor says ${expected.size} bytes` : ''),
      );
    }
    await this.commitBlob(tmp, got.digest);
    return got;
  }

  /** Copies a host file in as a blob (verifying it against `expected` if given). */
  putFile(src: string, expected?: BlobRef): Promise<BlobRef> {
    return this.putStream((out) => pipeline(createReadStream(src), out, { end: false }), expected);
  }

  /** Stores a JSON document or other small content as a blob. */
  async putBytes(data: Buffer | string): Promise<BlobRef> {
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    return this.putStream(async (out) => {
      await new Promise<void>((resolve, reject) => out.write(buf, (e) => (e ? reject(e) : resolve())));
    });
  }

  private async commitBlob(tmp: string, digest: string): Promise<void> {
    const dest = this.blobPath(digest);
    // Content-addressed: an existing blob already holds these exact bytes.
    if (await exists(dest)) {
      await rm(tmp, { force: true });
      return;
    }
    await rename(tmp, dest);
    await syncDir(this.blobs);
  }

  async readBlob(digest: string): Promise<Buffer> {
    try {
      return await readFile(this.blobPath(digest));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT')
        throw err('UH_NOT_FOUND', `image store has no blob ${digest}`);
      throw e;
    }
  }

  async readJson<T>(digest: string): Promise<T> {
    const buf = await this.readBlob(digest);
    try {
      return JSON.parse(buf.toString('utf8')) as T;
    } catch {
      throw err('UH_INVALID', `blob ${digest} is not valid JSON`);
    }
  }

  async index(): Promise<Index> {
    return JSON.parse(await readFile(join(this.root, 'index.json'), 'utf8')) as Index;
  }

  /** Lists a manifest in index.json (once per digest). Call after its blobs are stored. */
  async addManifest(desc: Descriptor): Promise<void> {
    await this.withIndexLock(async () => {
      const index = await this.index();
      if (index.manifests.some((m) => m.digest === desc.digest)) return;
      index.manifests.push(desc);
      await atomicWrite(join(this.root, 'index.json'), JSON.stringify(index));
    });
  }

  /**
   * index.json is read-modify-written; the CLI and the daemon may import at
   * once, so writers take a lock file (created O_EXCL; a crashed holder's
   * lock goes stale after 30 s) besides an in-process queue.
   */
  private withIndexLock<T>(fn: () => Promise<T>): Promise<T> {
    return this.inProcess(async () => {
      const lock = join(this.root, 'index.json.lock');
      const deadline = Date.now() + LOCK_WAIT_MS;
      for (;;) {
        try {
          await (await open(lock, 'wx')).close();
          break;
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
          const st = await stat(lock).catch(() => undefined);
          if (st && Date.now() - st.mtimeMs > LOCK_STALE_MS) await rm(lock, { force: true });
          else if (Date.now() > deadline)
            throw err('UH_FAILED', `image store is locked (${lock}); is another import stuck?`);
          else await sleep(50);
        }
      }
      try {
        return await fn();
      } finally {
        await rm(lock, { force: true });
      }
    });
  }
}
