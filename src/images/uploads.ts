import { createHash, randomUUID, type Hash } from 'node:crypto';
import { createReadStream, renameSync, rmSync } from 'node:fs';
import { mkdir, open, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { syncDir } from './fsutil.js';
import type { ImageLayout } from './layout.js';

/** What an upload is for, kept beside its data. */
export interface UploadMeta {
  id: string;
  repo: string;
  /** the user that started it: only they may continue it */
  user: string;
  started_at: string;
}

/** Bytes gathered from an upload's body before one write to its file. */
const WRITE_BATCH = 1024 * 1024;
/**
 * Bytes written between two background `fdatasync`s of a long append: the
 * kernel writes the upload out while the rest arrives, so the fsync before
 * the blob is acknowledged (`flush`) finds little left to write.
 */
const SYNC_EVERY = 16 * 1024 * 1024;

/** Why an append stopped early. */
export class UploadLimit extends Error {
  constructor(readonly received: number) {
    super('upload exceeds its limit');
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Blob uploads in progress (the registry's upload sessions), as files in
 * `<images>/uploads/`: `<id>` holds the bytes received so far and
 * `<id>.json` what the upload is for. Data is streamed to disk and hashed
 * as it arrives (the hash state is kept while the process lives; after a
 * restart, or a cut mid-chunk, the file is hashed again at the end). An
 * upload survives a cut connection and a restart: its size is the file's.
 */
export class Uploads {
  readonly dir: string;
  /** running hashes: valid while `size` equals the file's size */
  private readonly hashes = new Map<string, { hash: Hash; size: number }>();
  /** uploads with a write under way (one at a time per upload) */
  private readonly busy = new Set<string>();
  /** the records of uploads this process started or read (the file is read once) */
  private readonly metas = new Map<string, UploadMeta>();

  constructor(readonly layout: ImageLayout) {
    this.dir = join(layout.root, 'uploads');
  }

  async init(): Promise<this> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    return this;
  }

  private data(id: string): string {
    return join(this.dir, id);
  }

  async create(repo: string, user: string, now: Date): Promise<UploadMeta> {
    const meta: UploadMeta = { id: randomUUID(), repo, user, started_at: now.toISOString() };
    // No fsync: a session needs to outlive the daemon's kill, which the page cache does; after a
    // power cut it may be gone (BLOB_UPLOAD_UNKNOWN: the client starts again), and a record torn
    // by a kill mid-write was never acknowledged. Two fsyncs per upload less (docs/registry.md).
    await (await open(this.data(meta.id), 'wx', 0o600)).close();
    await writeFile(`${this.data(meta.id)}.json`, JSON.stringify(meta), { mode: 0o600, flag: 'wx' });
    this.metas.set(meta.id, meta);
    this.hashes.set(meta.id, { hash: createHash('sha256'), size: 0 });
    return meta;
  }

  /** The upload's record, or undefined when it does not exist (finished, cancelled, reclaimed, or never). */
  async meta(id: string): Promise<UploadMeta | undefined> {
    if (!UUID.test(id)) return undefined;
    const known = this.metas.get(id);
    if (known) return known;
    try {
      const meta = JSON.parse(await readFile(`${this.data(id)}.json`, 'utf8')) as UploadMeta;
      this.metas.set(id, meta);
      return meta;
    } catch {
      return undefined;
    }
  }

  /** Bytes received so far. */
  async size(id: string): Promise<number> {
    return (await stat(this.data(id))).size;
  }

  isBusy(id: string): boolean {
    return this.busy.has(id);
  }

  /**
   * Appends what `body` carries at offset `at` (the current size), at most
   * `limit` bytes in all (the upload's total; beyond it UploadLimit is
   * thrown and what was appended stays for the caller to drop). A body cut
   * short keeps what arrived. Returns the new size.
   */
  async append(id: string, body: Readable, limit: number): Promise<number> {
    this.busy.add(id);
    const fh = await open(this.data(id), 'a');
    try {
      let size = (await fh.stat()).size;
      let h = this.hashes.get(id);
      if (h && h.size !== size) h = undefined;
      if (!h && size === 0) h = { hash: createHash('sha256'), size: 0 };
      // Not `for await`: leaving it early would destroy the request and with it the socket the answer goes on.
      const chunks = (body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
      // Writes go out in batches of about WRITE_BATCH bytes, one in flight while the next fills,
      // so reading the socket and writing the file overlap (one write per socket chunk kept the
      // socket paused during every write). What arrived is written before this returns or throws.
      let batch: Buffer[] = [];
      let batched = 0;
      let inFlight: Promise<unknown> = Promise.resolve();
      let unsynced = 0;
      let syncing: Promise<void> | undefined;
      const flush = async (): Promise<void> => {
        await inFlight;
        if (batch.length === 0) return;
        const out = batch;
        unsynced += batched;
        batch = [];
        batched = 0;
        inFlight = fh.writev(out);
        if (unsynced >= SYNC_EVERY && !syncing) {
          unsynced = 0;
          // one at a time, never awaited here: only an early write-out (a failure shows in `flush`)
          syncing = inFlight
            .then(() => fh.datasync())
            .catch(() => undefined)
            .finally(() => (syncing = undefined));
        }
      };
      try {
        for (;;) {
          const next = await chunks.next();
          if (next.done) break;
          const chunk = next.value;
          if (size + chunk.length > limit) {
            body.pause();
            throw new UploadLimit(size + chunk.length);
          }
          batch.push(chunk);
          batched += chunk.length;
          size += chunk.length;
          if (h) {
            h.hash.update(chunk);
            h.size = size;
          }
          if (batched >= WRITE_BATCH) await flush();
        }
      } finally {
        await flush();
        await inFlight;
        await syncing;
      }
      if (h) this.hashes.set(id, h);
      else this.hashes.delete(id);
      return size;
    } finally {
      await fh.close();
      this.busy.delete(id);
    }
  }

  /** The digest of what was received: from the running hash, or by reading the file again. */
  async digest(id: string): Promise<{ digest: string; size: number }> {
    const size = await this.size(id);
    const h = this.hashes.get(id);
    if (h && h.size === size) return { digest: `sha256:${h.hash.copy().digest('hex')}`, size };
    const hash = createHash('sha256');
    await pipeline(createReadStream(this.data(id)), hash);
    return { digest: `sha256:${hash.digest('hex')}`, size };
  }

  /** Flushes the data to disk: call before `commitSync`. */
  async flush(id: string): Promise<void> {
    const fh = await open(this.data(id), 'r+');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  }

  /**
   * Moves a verified upload into the layout as blob `digest` (or drops it
   * when the blob exists already) and forgets the upload. Synchronous, so a
   * store transaction can make it and the link one step (docs/registry.md).
   */
  commitSync(id: string, digest: string): void {
    const dest = this.layout.blobPath(digest);
    try {
      renameSync(this.data(id), dest);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    rmSync(`${this.data(id)}.json`, { force: true });
    this.hashes.delete(id);
    this.metas.delete(id);
  }

  async syncBlobs(): Promise<void> {
    await syncDir(this.layout.blobs);
  }

  async remove(id: string): Promise<void> {
    this.hashes.delete(id);
    this.metas.delete(id);
    await rm(this.data(id), { force: true });
    await rm(`${this.data(id)}.json`, { force: true });
  }

  /** Removes uploads not written to for `maxAgeMs` (abandoned); returns how many went. */
  async reclaim(maxAgeMs: number, now = Date.now()): Promise<number> {
    let n = 0;
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      const id = name.replace(/\.json$/, '');
      if (name.endsWith('.json') || this.busy.has(id)) continue;
      const st = await stat(join(this.dir, name)).catch(() => undefined);
      if (st && now - st.mtimeMs > maxAgeMs) {
        await this.remove(id);
        n++;
      }
    }
    // metadata whose data is gone (a crash between the two removals)
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (!name.endsWith('.json')) continue;
      const st = await stat(join(this.dir, name.slice(0, -5))).catch(() => undefined);
      if (!st) await rm(join(this.dir, name), { force: true });
    }
    return n;
  }
}
