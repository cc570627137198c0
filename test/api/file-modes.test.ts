import { chmodSync, mkdirSync, statSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';
import { VolumeController } from '../../src/reconcile/volumes.js';
import { Ext4Volumes } from '../../src/volumes/ext4.js';

let h: Harness;
const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };

const mode = (path: string): number => statSync(path).mode & 0o777;
let laxBefore = 0;

before(async () => {
  // A lax launcher (a shell's usual umask) and a data dir it made world-readable: the daemon must close both.
  process.umask(0o022);
  const dataDir = join(tmpdir(), `unihost-modes-${randomBytes(4).toString('hex')}`);
  mkdirSync(dataDir, { mode: 0o755 });
  chmodSync(dataDir, 0o755);
  laxBefore = mode(dataDir);
  h = await startHarness(
    // the SQLite file's mode is checked: SQLite, whatever UNIHOST_TEST_STORE says
    { dataDir, store: { url: '' } },
    (s) => [new VolumeController(s, quiet, new Ext4Volumes(s.paths.volumes))],
  );
});
after(async () => h.close());

test('the data dir and the database are for the daemon only', () => {
  assert.equal(laxBefore, 0o755, 'the data dir was world-readable before the daemon started');
  assert.equal(mode(h.dataDir), 0o700);
  assert.equal(mode(h.daemon.services.paths.db), 0o600);
  assert.equal(process.umask(), 0o077);
});

test('a new volume image (made by mkfs.ext4) is for the daemon only', async () => {
  const token = await h.user('modes');
  const r = await h.call('POST', '/v1/volumes', token, { name: 'data', size_mb: 4 });
  assert.equal(r.status, 200, r.text);
  const id = r.body.data.volumes[0].uuid as string;
  await h.until(async () => {
    const v = await h.daemon.store.read((tx) => tx.volumes.getAny(id));
    assert.notEqual(v?.state, 'error', v?.message ?? '');
    return v?.state === 'available';
  }, 20_000);
  assert.equal(mode(new Ext4Volumes(h.daemon.services.paths.volumes).path(id)), 0o600);
});
