import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { checkVolumeFile } from './ext4.js';

const dir = mkdtempSync(join(tmpdir(), 'uhvol-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('a freshly formatted volume image passes the check', async () => {
  const f = join(dir, 'ok.ext4');
  execFileSync('mkfs.ext4', ['-q', '-F', '-b', '4096', f, '8M']);
  assert.equal(await checkVolumeFile(f), null);
});

test('a damaged or missing image is reported with a message', async () => {
  const f = join(dir, 'bad.ext4');
  execFileSync('mkfs.ext4', ['-q', '-F', '-b', '4096', f, '8M']);
  const fd = openSync(f, 'r+');
  writeSync(fd, Buffer.alloc(4096, 0xff), 0, 4096, 1024); // overwrite the superblock
  closeSync(fd);
  assert.match((await checkVolumeFile(f)) ?? '', /damaged/);
  assert.match((await checkVolumeFile(join(dir, 'nope.ext4'))) ?? '', /missing/);
});
