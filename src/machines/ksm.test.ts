import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { enableKsm } from './ksm.js';

test('enableKsm: turns a stopped KSM on, leaves a running one, reports a missing one', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'unihost-ksm-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const run = join(dir, 'run');
  writeFileSync(run, '0\n');
  assert.equal(enableKsm(run), 'enabled');
  assert.equal(readFileSync(run, 'utf8'), '1');
  assert.equal(enableKsm(run), 'already on');
  assert.equal(enableKsm(join(dir, 'missing', 'run')), 'unavailable');
});
