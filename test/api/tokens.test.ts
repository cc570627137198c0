import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';

const run = promisify(execFile);
const CLI = resolve(import.meta.dirname, '../../src/cli/index.ts');
let h: Harness;

/** Runs the real `unihost admin` CLI (through tsx) in a child process, on the harness's data dir. */
async function admin(...args: string[]): Promise<{ stdout: string; stderr: string }> {
  const argv = ['node', 'unihost', 'admin', '--data-dir', h.dataDir, '--store', h.storeUrl, ...args];
  const code = `const { main } = await import(${JSON.stringify(CLI)}); await main(${JSON.stringify(argv)});`;
  return run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    cwd: resolve(import.meta.dirname, '../..'),
  });
}

const status = async (token: string): Promise<number> => (await h.call('GET', '/v1/instances', token)).status;

before(async () => {
  h = await startHarness();
});
after(async () => h.close());

describe('strict token decoding', () => {
  test('a token with characters appended, or re-padded, answers 401', async () => {
    const token = await h.user('strict');
    assert.equal(await status(token), 200);
    const bare = token.replace(/=+$/, '');
    const variants = [token + 'A', token + '=', token + '==', token + 'AAAA', token + '=x', token + '%', bare + 'A'];
    if (bare !== token) variants.push(bare);
    for (const v of variants) assert.equal(await status(v), 401, `variant ${v} of ${token} authenticated`);
    assert.equal(await status(token), 200);
  });

  test("many invalid variants do not evict another user's cached token", async () => {
    const mallory = await h.user('mallory');
    const victim = await h.user('victim');
    assert.equal(await status(victim), 200);
    assert.equal(h.daemon.services.users.cachedUser(`Bearer ${victim}`)?.name, 'victim');
    for (let i = 0; i < 200; i++) assert.equal(await status(mallory + 'A'.repeat(1 + (i % 8))), 401);
    assert.equal(h.daemon.services.users.cachedUser(`Bearer ${victim}`)?.name, 'victim');
  });
});

describe('revocation', () => {
  test('a token revoked in the daemon answers 401 at once, although it was cached', async () => {
    const token = await h.user('rev-a');
    assert.equal(await status(token), 200);
    assert.ok(h.daemon.services.users.cachedUser(`Bearer ${token}`));
    const gone = await h.daemon.services.users.revokeTokens('rev-a', { all: true });
    assert.equal(gone.length, 1);
    assert.equal(await status(token), 401);
  });

  test('`admin user token revoke` (another process) takes effect at once; other tokens keep working', async () => {
    const first = await h.user('rev-b');
    const { stdout, stderr } = await admin('user', 'token', 'rev-b');
    const second = stdout.trim();
    const secondId = /token id: ([0-9a-f-]{36})/.exec(stderr)?.[1];
    assert.ok(secondId, stderr);
    assert.equal(await status(first), 200);
    assert.equal(await status(second), 200); // both cached now

    const list = (await admin('user', 'token', 'list', 'rev-b')).stdout.trim().split('\n');
    assert.equal(list.length, 2);
    assert.ok(list.some((l) => l.startsWith(secondId)));

    const out = (await admin('user', 'token', 'revoke', 'rev-b', secondId)).stdout;
    assert.match(out, new RegExp(`revoked 1 token\\(s\\) of 'rev-b': ${secondId}`));
    assert.equal(await status(second), 401);
    assert.equal(await status(first), 200);

    await admin('user', 'token', 'revoke', 'rev-b', '--all');
    assert.equal(await status(first), 401);
    assert.equal((await admin('user', 'token', 'list', 'rev-b')).stdout.trim(), '');
  });

  test('revoking an unknown token id is an error naming it; the command needs an id or --all', async () => {
    await h.user('rev-c');
    await assert.rejects(admin('user', 'token', 'revoke', 'rev-c', 'nope'), /user 'rev-c' has no token 'nope'/);
    await assert.rejects(admin('user', 'token', 'revoke', 'rev-c'), /give a token id or --all/);
  });
});
