import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { WalSync } from './wal-sync.js';

/** A WAL whose syncs are counted and finished by the test. */
function scripted() {
  const log = { opens: 0, syncs: 0, fail: false };
  const pending: (() => void)[] = [];
  const w = new WalSync('/nonexistent-wal', async () => {
    log.opens++;
    return {
      datasync: () =>
        new Promise<void>((resolve, reject) => {
          log.syncs++;
          const fail = log.fail;
          pending.push(() => (fail ? reject(new Error('EIO')) : resolve()));
        }),
      close: async () => undefined,
    };
  });
  const finish = async (): Promise<void> => {
    for (let i = 0; i < 20 && pending.length === 0; i++) await new Promise((r) => setImmediate(r));
    pending.shift()!();
    await new Promise((r) => setImmediate(r));
  };
  return { w, log, finish };
}

test('commits during a sync share the next one; none is answered by a sync that began before it', async () => {
  const { w, log, finish } = scripted();
  const done: string[] = [];
  const first = w.sync().then(() => done.push('first'));
  await new Promise((r) => setImmediate(r));
  // three commits while the first sync runs: one more sync covers them all
  const later = [1, 2, 3].map((n) => w.sync().then(() => done.push(`later${n}`)));
  await finish();
  await first;
  assert.deepEqual(done, ['first'], 'the later commits wait for a sync of their own');
  await finish();
  await Promise.all(later);
  assert.deepEqual(done, ['first', 'later1', 'later2', 'later3']);
  assert.equal(log.syncs, 2);
  assert.equal(log.opens, 1, 'one descriptor');
  // nothing under way: a new commit starts a sync at once
  const again = w.sync();
  await finish();
  await again;
  assert.equal(log.syncs, 3);
});

test('a failed sync fails its commits, and the next sync opens the WAL again', async () => {
  const { w, log, finish } = scripted();
  log.fail = true;
  const failing = assert.rejects(w.sync(), /EIO/);
  await finish();
  await failing;
  log.fail = false;
  const ok = w.sync();
  await finish();
  await ok;
  assert.equal(log.opens, 2);
});

test('a real file: sync resolves, close waits and closes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'uh-walsync-'));
  try {
    const f = join(dir, 'db-wal');
    writeFileSync(f, 'x');
    const w = new WalSync(f);
    await Promise.all([w.sync(), w.sync(), w.sync()]);
    await w.close();
    await assert.rejects(new WalSync(join(dir, 'missing')).sync(), /ENOENT/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
