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
import type { VolumeDriver } from './driver.js';
import { Ext4Volumes } from './ext4.js';
import { MemoryVolumes } from './memory.js';

function contract(name: string, make: () => { d: VolumeDriver; damage(id: string): void; stray(id: string): void }) {
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
  };
});

contract('MemoryVolumes', () => {
  const d = new MemoryVolumes();
  return {
    d,
    damage: (id) => d.corrupt(id),
    stray: (id) => d.partial.add(id),
  };
});
