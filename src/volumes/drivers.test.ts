/**
 * The VolumeDriver contract (driver.ts), run against both implementations:
 * Ext4Volumes with real mkfs.ext4 and e2fsck in a temp dir, and
 * MemoryVolumes. The in-memory driver that unit tests use must answer as
 * the real one does.
 */
import assert from 'node:assert/strict';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import { runCommand } from '../network/cmd.js';
import type { VolumeDriver } from './driver.js';
import { Ext4Volumes } from './ext4.js';
import { MemoryVolumes } from './memory.js';

interface Made {
  d: VolumeDriver;
  damage(id: string): void;
  stray(id: string): void;
  /** puts `mb` MiB of files into the image (the space a shrink must keep) */
  fill(id: string, mb: number): Promise<void>;
}

function contract(name: string, make: () => Made) {
  describe(`VolumeDriver contract: ${name}`, () => {
    test('a formatted image exists, passes the check, and its path names the volume', async () => {
      const { d } = make();
      await d.format('v1', 8);
      assert.equal(d.exists('v1'), true);
      assert.equal(await d.check('v1'), null);
      assert.equal(basename(d.path('v1')), 'v1.ext4');
      await d.format('v1', 8); // formatting again starts over
      assert.equal(await d.check('v1'), null);
    });

    test('a damaged or missing image is reported with what is wrong', async () => {
      const { d, damage } = make();
      await d.format('bad', 8);
      damage('bad');
      assert.match((await d.check('bad')) ?? '', /damaged/);
      assert.match((await d.check('nope')) ?? '', /missing/);
      assert.equal(d.exists('nope'), false);
    });

    test('remove is idempotent; prune removes what no volume owns and keeps the rest', async () => {
      const { d, stray } = make();
      await d.format('keep', 8);
      await d.format('gone', 8);
      stray('leftover');
      const removed = d.prune(new Set(['keep']));
      assert.deepEqual(removed.sort(), ['gone.ext4', 'leftover.ext4.tmp']);
      assert.equal(d.exists('keep'), true);
      assert.equal(d.exists('gone'), false);
      await d.remove('keep');
      await d.remove('keep');
      assert.equal(d.exists('keep'), false);
    });

    test('a copy is an image of its own; resize grows and shrinks it and its file system', async () => {
      const { d } = make();
      await d.format('orig', 16);
      await d.copy('orig', 'dup');
      assert.equal(d.sizeMb('dup'), 16);
      assert.equal(await d.check('dup'), null);
      await d.resize('dup', 40);
      assert.equal(d.sizeMb('dup'), 40);
      assert.equal(await d.check('dup'), null);
      await d.resize('dup', 12);
      assert.equal(d.sizeMb('dup'), 12);
      assert.equal(await d.check('dup'), null);
      assert.equal(d.sizeMb('orig'), 16, 'the source keeps its size');
      const used = await d.usedMb('orig');
      assert.ok(used >= 1 && used < 16, `used ${used} MiB of an empty 16 MiB volume`);
    });

    test('a shrink below what the files use is refused and leaves the image as it was', async () => {
      const { d, fill } = make();
      await d.format('full', 32);
      await fill('full', 20);
      assert.ok((await d.usedMb('full')) >= 20);
      await assert.rejects(d.resize('full', 10));
      assert.equal(d.sizeMb('full'), 32);
      assert.equal(await d.check('full'), null);
      await assert.rejects(d.resize('nope', 10), /missing/);
    });
  });
}

const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

contract('Ext4Volumes (mkfs.ext4, e2fsck)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uhvolc-'));
  dirs.push(dir);
  const d = new Ext4Volumes(dir);
  return {
    d,
    damage: (id) => {
      const fd = openSync(d.path(id), 'r+');
      writeSync(fd, Buffer.alloc(4096, 0xff), 0, 4096, 1024); // over the superblock
      closeSync(fd);
    },
    // a partial image a crash left behind
    stray: (id) => writeFileSync(`${d.path(id)}.tmp`, 'partial'),
    fill: async (id, mb) => {
      const src = join(dir, `fill-${id}`);
      writeFileSync(src, randomBytes(mb * 1024 * 1024)); // random: nothing to compress or leave sparse
      await debugfs(d.path(id), `write ${src} fill`);
      rmSync(src);
    },
  };
});

contract('MemoryVolumes', () => {
  const d = new MemoryVolumes();
  return {
    d,
    damage: (id) => d.corrupt(id),
    stray: (id) => d.partial.add(id),
    fill: async (id, mb) => void d.used.set(id, mb + 1),
  };
});

/** debugfs on an image: reads and writes its files without mounting it. */
async function debugfs(image: string, request: string, write = true): Promise<string> {
  return (await runCommand(['debugfs', ...(write ? ['-w'] : []), '-R', request, image], { timeoutMs: 30_000 })).stdout;
}

test('Ext4Volumes: the files survive a copy, a grow and a shrink', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'uhvolf-'));
  dirs.push(dir);
  const d = new Ext4Volumes(dir);
  await d.format('a', 16);
  const note = join(dir, 'note.txt');
  writeFileSync(note, 'kept across copies and resizes\n');
  await debugfs(d.path('a'), `write ${note} note.txt`);
  await d.copy('a', 'b');
  await d.resize('b', 64);
  await d.resize('b', 10);
  assert.equal(await debugfs(d.path('b'), 'cat /note.txt', false), 'kept across copies and resizes\n');
  assert.equal(await debugfs(d.path('a'), 'cat /note.txt', false), 'kept across copies and resizes\n');
});
