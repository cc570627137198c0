/**
 * The store setting from the command line: a URL with a typo is refused with
 * the reason, and a server that cannot be reached stops `serve` (and the
 * admin commands) at once with an error naming where it tried, never the
 * password; exit code 1, one line, no stack trace.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runCli, type CliResult } from '../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'uh-cli-store-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function refused(r: CliResult, re: RegExp): void {
  assert.equal(r.code, 1, `exit code; stderr: ${r.stderr}`);
  assert.doesNotMatch(r.stderr, /\n\s+at |hunter2/, r.stderr);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, re);
}

const serve = (store: string) =>
  runCli(['serve', '--data-dir', dir, '--listen', '127.0.0.1:0', '--store', store], {}, 30_000);

test('serve: an unreachable PostgreSQL is named (socket and database), without the password', async () => {
  refused(
    await serve(`postgresql://unihost:hunter2@/unihost?host=${join(dir, 'no-such-socket-dir')}`),
    /^unihost: cannot reach PostgreSQL on the socket .*no-such-socket-dir\/\.s\.PGSQL\.5432, database 'unihost' as 'unihost': /,
  );
});

test('serve and admin: a store URL with a typo is refused with the reason', async () => {
  refused(
    await serve('postgress://unihost:hunter2@db/unihost'),
    /store URL 'postgress:\/\/unihost:\*\*\*@db\/unihost' is refused: unknown scheme 'postgress:'/,
  );
  refused(
    await runCli(['admin', '--data-dir', dir, '--store', 'postgresql://u@h/db?sslmod=require', 'user', 'list']),
    /unknown option 'sslmod'/,
  );
});

test('UNIHOST_STORE is the same setting', async () => {
  refused(
    await runCli(['admin', '--data-dir', dir, 'user', 'list'], { UNIHOST_STORE: 'mysql://u@h/db' }),
    /unknown scheme 'mysql:'/,
  );
});
