import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import { ImageLayout } from './layout.js';
import { UploadLimit, Uploads } from './uploads.js';

const dir = mkdtempSync(join(tmpdir(), 'uh-uploads-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const MiB = 1024 * 1024;
/** `n` MiB of content, 64 KiB at a time (what a socket hands over), chunk `k` stamped with `k + from`. */
function body(n: number, from = 0): Buffer[] {
  return Array.from({ length: n * 16 }, (_, k) => Buffer.alloc(64 * 1024, `${k + from} `));
}

test('a large upload in two chunks: every byte lands, hashed as it arrives', async () => {
  const uploads = await new Uploads(await new ImageLayout(dir).init()).init();
  const up = await uploads.create('alice/app', 'alice', new Date());
  // 40 MiB each, in 1 MiB batches with one write in flight while the next fills, and a background
  // fdatasync every 16 MiB
  const first = body(40);
  const second = body(40, first.length);
  assert.equal(await uploads.append(up.id, Readable.from(first), Infinity), 40 * MiB);
  assert.equal(await uploads.append(up.id, Readable.from(second), Infinity), 80 * MiB);
  const hash = createHash('sha256');
  for (const c of [...first, ...second]) hash.update(c);
  assert.deepEqual(await uploads.digest(up.id), { digest: `sha256:${hash.digest('hex')}`, size: 80 * MiB });
});

test('an upload over its limit stops there, and what arrived before is in the file', async () => {
  const uploads = await new Uploads(await new ImageLayout(dir).init()).init();
  const up = await uploads.create('alice/app', 'alice', new Date());
  await assert.rejects(uploads.append(up.id, Readable.from(body(40)), 36 * MiB), (e) => e instanceof UploadLimit);
  assert.equal(statSync(join(uploads.dir, up.id)).size, 36 * MiB);
});
