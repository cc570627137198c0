import { createReadStream, createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Header, list, type ReadEntry } from 'tar';
import { err } from '../errors.js';
import { normTarPath } from './oci.js';

const BLOCK = 512;
const EPOCH = new Date(0);

export interface LayerFile {
  /** path inside the layer, without a leading slash (as kraftkit writes it) */
  path: string;
  /** file on the host */
  src: string;
}

function writeChunk(out: Writable, chunk: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    out.write(chunk, (e) => (e ? reject(e) : resolve()));
  });
}

/**
 * Writes a tar layer that depends only on the files' paths and contents:
 * entries sorted by path, mode 0644, uid/gid 0, no user names, mtime 0,
 * no directory entries and no PAX headers (kraftkit's kernel layers hold a
 * single file entry, too). So importing the same files twice gives the same
 * layer digest. The header encoding is node-tar's.
 */
export async function writeTarLayer(files: LayerFile[], out: Writable): Promise<void> {
  const sorted = [...files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  for (const f of sorted) {
    const { size } = await stat(f.src);
    const h = new Header({
      path: f.path,
      mode: 0o644,
      uid: 0,
      gid: 0,
      size,
      mtime: EPOCH,
      type: 'File',
      uname: '',
      gname: '',
    });
    // encode() returns true when the header needs PAX records (long path, huge file): not deterministic enough.
    if (h.encode() || !h.block)
      throw err('UH_INVALID', `cannot store ${f.path} (${size} bytes) in a plain ustar entry`);
    await writeChunk(out, h.block);
    for await (const chunk of createReadStream(f.src)) await writeChunk(out, chunk as Buffer);
    const pad = (BLOCK - (size % BLOCK)) % BLOCK;
    if (pad > 0) await writeChunk(out, Buffer.alloc(pad));
  }
  await writeChunk(out, Buffer.alloc(BLOCK * 2));
}

/**
 * Reads a tar layer (plain or gzip) and copies the regular files whose
 * normalized path is a key of `wanted` to the host file named by its value.
 * Returns the sizes of the files found.
 */
export async function extractFiles(layer: string, wanted: Record<string, string>): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  // A path may occur twice in one tar; the later entry wins, so writes to one file are chained.
  const writes = new Map<string, Promise<void>>();
  await list({
    file: layer,
    noResume: true,
    onReadEntry: (entry: ReadEntry) => {
      const p = normTarPath(entry.path);
      const dest = wanted[p];
      if (dest === undefined || entry.type !== 'File') {
        entry.resume();
        return;
      }
      found.set(p, entry.size);
      const prev = writes.get(p) ?? Promise.resolve();
      writes.set(
        p,
        prev.then(() => pipeline(entry, createWriteStream(dest, { mode: 0o644 }))),
      );
    },
  });
  await Promise.all(writes.values());
  return found;
}

/** Paths and sizes of the regular files in a tar layer. */
export async function listFiles(layer: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  await list({
    file: layer,
    onReadEntry: (entry: ReadEntry) => {
      if (entry.type === 'File') out.set(normTarPath(entry.path), entry.size);
    },
  });
  return out;
}
