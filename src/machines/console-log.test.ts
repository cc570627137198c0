/**
 * ConsoleLog on real files: a writer that holds the file open (a VM's pump)
 * beside one-shot writers (the platform's `[unihost]` lines) that may trim.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ConsoleLog } from './console-log.js';

const root = mkdtempSync(join(tmpdir(), 'uh-console-log-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('a held writer goes on into the new file after another writer trimmed it; offsets stay absolute', () => {
  const dir = join(root, 'a');
  const held = new ConsoleLog(dir, 64, true);
  held.append(Buffer.from('boot 1\n'));
  held.append(Buffer.from('boot 2\n'));
  // a platform line from a one-shot writer, past the bound: it trims (replaces the file)
  new ConsoleLog(dir, 64).append(Buffer.from(`[unihost] ${'x'.repeat(60)}\n`));
  held.append(Buffer.from('after the trim\n'));
  held.close();
  const text = readFileSync(join(dir, 'console.log'), 'utf8');
  assert.ok(text.endsWith('after the trim\n'), `the held writer's bytes are in the file read: ${JSON.stringify(text)}`);
  const log = new ConsoleLog(dir, 64);
  const all = 7 + 7 + 71 + 15;
  const r = log.read(-15, 100);
  assert.equal(r.output.toString(), 'after the trim\n');
  assert.equal(r.range.end, all - 1, 'absolute offsets count the trimmed bytes');
});

test('a held writer trims itself and keeps appending; close lets the file go', () => {
  const dir = join(root, 'b');
  const held = new ConsoleLog(dir, 32, true);
  for (let i = 0; i < 10; i++) held.append(Buffer.from(`line ${i}\n`));
  held.close();
  held.close(); // twice: nothing to close
  const text = readFileSync(join(dir, 'console.log'), 'utf8');
  assert.ok(text.length <= 32 && text.endsWith('line 9\n'), JSON.stringify(text));
  assert.equal(new ConsoleLog(dir, 32).base() + text.length, 70);
});
