/**
 * Image content shared through the store (docs/hosts.md, "Images"): the
 * process that imports or receives an image publishes its blobs (manifest,
 * config, layers) in chunks; the agent of another host that boots it
 * fetches the ones its data dir lacks, each verified against its digest.
 */
import { createReadStream } from 'node:fs';
import type { ImageLayout } from './layout.js';
import type { Manifest } from './oci.js';

/** Chunks of 1 MiB: rows a database moves easily. */
export const CHUNK_BYTES = 1024 * 1024;

/** Where blobs are shared (the store's `blobs`, src/store/types.ts). */
export interface BlobShare {
  stat(digest: string): Promise<{ size: number; chunks: number } | undefined>;
  putChunk(digest: string, seq: number, data: Uint8Array): Promise<void>;
  finish(digest: string, size: number, chunks: number): Promise<void>;
  chunk(digest: string, seq: number): Promise<Uint8Array | undefined>;
}

/** The digests an image manifest names: itself, its config, its layers. */
async function imageBlobs(layout: ImageLayout, digest: string): Promise<string[]> {
  const m = await layout.readJson<Manifest>(digest);
  return [digest, ...(m.config ? [m.config.digest] : []), ...(m.layers ?? []).map((l) => l.digest)];
}

/** Publishes the blobs of image `digest` that the share lacks; returns how many it wrote. */
export async function publishImage(layout: ImageLayout, digest: string, share: BlobShare): Promise<number> {
  let wrote = 0;
  for (const d of await imageBlobs(layout, digest)) {
    if (await share.stat(d)) continue;
    let seq = 0;
    let size = 0;
    let pending: Buffer = Buffer.alloc(0);
    const flush = async (last: boolean): Promise<void> => {
      while (pending.length >= CHUNK_BYTES || (last && pending.length > 0)) {
        const part = pending.subarray(0, CHUNK_BYTES);
        pending = pending.subarray(part.length);
        await share.putChunk(d, seq++, Buffer.from(part));
      }
    };
    for await (const buf of createReadStream(layout.blobPath(d), { highWaterMark: CHUNK_BYTES })) {
      const b = buf as Buffer;
      size += b.length;
      pending = pending.length ? Buffer.concat([pending, b]) : b;
      await flush(false);
    }
    await flush(true);
    await share.finish(d, size, seq);
    wrote++;
  }
  return wrote;
}

/**
 * Makes image `digest` present in `layout`: every blob it lacks is fetched
 * from the share and stored only if it hashes to its digest. Throws, naming
 * the blob, when the share does not have it (it was imported on a host whose
 * store is not shared, or before sharing existed). Returns how many it fetched.
 */
export async function fetchImage(layout: ImageLayout, digest: string, share: BlobShare): Promise<number> {
  let fetched = 0;
  const one = async (d: string): Promise<void> => {
    if (await layout.hasBlob(d)) return;
    const st = await share.stat(d);
    if (!st)
      throw new Error(
        `image blob ${d} is neither on this host nor in the store: import or push the image again (docs/hosts.md)`,
      );
    await layout.init();
    await layout.putStream(
      async (out) => {
        for (let seq = 0; seq < st.chunks; seq++) {
          const data = await share.chunk(d, seq);
          if (!data) throw new Error(`image blob ${d}: chunk ${seq} of ${st.chunks} is missing in the store`);
          await new Promise<void>((res, rej) => out.write(data, (e) => (e ? rej(e) : res())));
        }
      },
      { digest: d, size: st.size },
    );
    fetched++;
  };
  await one(digest);
  for (const d of (await imageBlobs(layout, digest)).slice(1)) await one(d);
  return fetched;
}
