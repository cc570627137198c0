import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { buildKernelImage } from './build.js';
import { imageBootFiles } from './boot-files.js';
import { ImageLayout } from './layout.js';
import { CHUNK_BYTES, fetchImage, publishImage, type BlobShare } from './share.js';
import { elf64Kernel } from './testing/fixtures.js';

/** The store's blob tables, in memory (the real ones: test/api/hosts.test.ts on PostgreSQL). */
function memoryShare(): BlobShare & { rows: Map<string, Buffer> } {
  const rows = new Map<string, Buffer>();
  const done = new Map<string, { size: number; chunks: number }>();
  return {
    rows,
    stat: async (d) => done.get(d),
    putChunk: async (d, seq, data) => void rows.set(`${d}/${seq}`, Buffer.from(data)),
    finish: async (d, size, chunks) => void done.set(d, { size, chunks }),
    chunk: async (d, seq) => rows.get(`${d}/${seq}`),
  };
}

let dir: string;
let digest: string;
let source: ImageLayout;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'uh-share-'));
  source = await new ImageLayout(join(dir, 'a')).init();
  const kernel = join(dir, 'vmlinux');
  writeFileSync(kernel, elf64Kernel(true));
  const initrd = join(dir, 'initrd');
  // more than two chunks: the chunking is exercised
  writeFileSync(initrd, randomBytes(2 * CHUNK_BYTES + 12345));
  digest = (await buildKernelImage(source, { name: 'app', kernel, initrd, machine: 'microvm' })).digest;
});
after(() => rmSync(dir, { recursive: true, force: true }));

test('an image published by one layout is fetched whole by another, verified, and boots from there', async () => {
  const share = memoryShare();
  assert.equal(await publishImage(source, digest, share), 4, 'manifest, config, kernel and initrd layers');
  assert.equal(await publishImage(source, digest, share), 0, 'published once');
  const other = new ImageLayout(join(dir, 'b'));
  assert.equal(await fetchImage(other, digest, share), 4);
  assert.equal(await fetchImage(other, digest, share), 0, 'nothing fetched twice');
  const a = await imageBootFiles({ images: source.root }, digest);
  const b = await imageBootFiles({ images: other.root }, digest);
  assert.deepEqual(readFileSync(b.initrd!), readFileSync(a.initrd!));
  assert.deepEqual(readFileSync(b.kernel), readFileSync(a.kernel));
});

test('a blob the share lacks, a missing or corrupt chunk: refused, naming the blob; nothing stored', async () => {
  const empty = memoryShare();
  await assert.rejects(
    fetchImage(new ImageLayout(join(dir, 'c')), digest, empty),
    /image blob sha256:[0-9a-f]{64} is neither on this host nor in the store/,
  );

  const share = memoryShare();
  await publishImage(source, digest, share);
  const key = [...share.rows.keys()].find((k) => k.endsWith('/1'))!; // the second chunk of the big layer
  const good = share.rows.get(key)!;
  share.rows.set(key, Buffer.from(good).fill(0, 0, 16));
  const d = new ImageLayout(join(dir, 'd'));
  await assert.rejects(fetchImage(d, digest, share), /corrupt blob sha256:/);
  share.rows.delete(key);
  await assert.rejects(fetchImage(d, digest, share), /chunk 1 of 3 is missing in the store/);
  share.rows.set(key, good);
  assert.equal(await fetchImage(d, digest, share), 1, 'only the blob that failed is fetched again');
});
