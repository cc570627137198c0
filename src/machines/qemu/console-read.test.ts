/**
 * The console pump's read (driver.ts readConsole): a backlog of hundreds of
 * MiB, written by a guest while the daemon was down, is never read whole.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CONSOLE_TAIL, MAX_CONSOLE_READ, readConsole } from './driver.js';
import { HeldFile } from './held-file.js';

const dir = mkdtempSync(join(tmpdir(), 'uh-console-read-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('a small backlog is read whole from the offset; a missing file reads nothing', () => {
  const f = join(dir, 'small.raw');
  writeFileSync(f, 'boot\nhello\n');
  assert.deepEqual(readConsole(new HeldFile(f), 5), { skipped: 0, bytes: Buffer.from('hello\n') });
  assert.deepEqual(readConsole(new HeldFile(join(dir, 'none.raw')), 0), { skipped: 0, bytes: Buffer.alloc(0) });
});

test('a backlog past the bound: all but the last CONSOLE_TAIL bytes are skipped, and counted', () => {
  const f = join(dir, 'flood.raw');
  const total = 3 * MAX_CONSOLE_READ;
  writeFileSync(f, Buffer.alloc(total - 9, 'x'));
  appendFileSync(f, 'the end.\n');
  const held = new HeldFile(f);
  const r = readConsole(held, 100);
  assert.equal(r.bytes.length, CONSOLE_TAIL);
  assert.equal(r.skipped, total - 100 - CONSOLE_TAIL);
  assert.equal(r.bytes.subarray(-9).toString(), 'the end.\n', 'the newest output is what is kept');
  // just at the bound: read whole
  assert.equal(readConsole(held, total - MAX_CONSOLE_READ).skipped, 0);
});
