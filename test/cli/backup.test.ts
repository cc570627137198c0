/**
 * `unihost admin backup` / `restore` on both stores, without VMs (the copy
 * of a running VM's volume is in test/vm/adopt.test.ts): what is restored
 * is what was backed up, and each bad case is refused in words with
 * nothing written.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runCli, type CliResult } from '../helpers/cli.js';
import { postgresMissing, testPostgres } from '../helpers/postgres.js';

const dir = mkdtempSync(join(tmpdir(), 'uh-cli-backup-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const ok = (r: CliResult): CliResult => {
  assert.equal(r.code, 0, `exit code; stderr: ${r.stderr}`);
  return r;
};
const refused = (r: CliResult, re: RegExp): void => {
  assert.equal(r.code, 1, `exit code; stdout: ${r.stdout}`);
  assert.doesNotMatch(r.stderr, /\n\s+at /, r.stderr);
  assert.match(r.stderr, re);
};
const admin = (dataDir: string, store: string | undefined, ...args: string[]) =>
  runCli(['admin', '--data-dir', dataDir, ...(store ? ['--store', store] : []), ...args]);
const users = async (dataDir: string, store?: string) =>
  ok(await admin(dataDir, store, 'user', 'list'))
    .stdout.trim()
    .split('\n')
    .map((l) => l.split('\t').slice(0, 2).join(' '))
    .sort();

test('SQLite: backup of a data dir, restore into a new one: the same users and files; bad cases refused', async () => {
  const src = join(dir, 'src');
  ok(await admin(src, undefined, 'user', 'create', 'alice'));
  ok(await admin(src, undefined, 'user', 'create', 'bob', '--developer'));
  mkdirSync(join(src, 'certs'), { recursive: true });
  writeFileSync(join(src, 'certs', 'example.pem'), 'a certificate');
  const bk = join(dir, 'bk');
  const b = ok(await admin(src, undefined, 'backup', bk));
  assert.match(b.stderr, /store: SQLite online backup/);
  assert.match(b.stderr, /backup of .* in .*bk: \d+ files/);
  const manifest = JSON.parse(readFileSync(join(bk, 'manifest.json'), 'utf8'));
  assert.deepEqual(manifest.files.map((f: { path: string }) => f.path).sort(), ['certs/example.pem', 'unihost.db']);

  const dst = join(dir, 'dst');
  const r = ok(await admin(dst, undefined, 'restore', bk));
  assert.match(r.stdout, /start it with: unihost serve --data-dir .*dst/);
  assert.deepEqual(await users(dst), await users(src));
  assert.equal(readFileSync(join(dst, 'certs', 'example.pem'), 'utf8'), 'a certificate');

  refused(await admin(src, undefined, 'backup', bk), /bk is not empty: a backup goes into a new directory/);
  refused(
    await admin(join(dir, 'nothing'), undefined, 'backup', join(dir, 'bk2')),
    /no store at .*nothing\/unihost\.db/,
  );
  assert.ok(!existsSync(join(dir, 'bk2')) && !existsSync(join(dir, 'nothing')), 'nothing made');
  refused(await admin(src, undefined, 'restore', bk), /src already holds a data dir \(unihost\.db\)/);
  refused(await admin(join(dir, 'x'), undefined, 'restore', src), /src is not a unihost backup \(manifest\.json: /);
  writeFileSync(join(bk, 'certs', 'example.pem'), 'another certificate');
  refused(
    await admin(join(dir, 'y'), undefined, 'restore', bk),
    /the backup is damaged: certs\/example\.pem differs from its checksum/,
  );
  assert.ok(!existsSync(join(dir, 'y')), 'nothing restored');
  assert.deepEqual(await users(src), await users(dst), 'the refusals changed nothing');
});

test('PostgreSQL: pg_dump into the backup, pg_restore into a new database; a database in use is refused', async (t) => {
  const missing = postgresMissing();
  if (missing) return t.skip(missing);
  const pg = testPostgres();
  const from = await pg.createDb();
  const to = await pg.createDb();
  const data = join(dir, 'pg-src');
  ok(await admin(data, from, 'user', 'create', 'carol'));
  const bk = join(dir, 'pg-bk');
  const b = ok(await admin(data, from, 'backup', bk));
  assert.match(b.stderr, /store: pg_dump/);
  assert.ok(readdirSync(bk).includes('store.pgdump'));
  refused(await admin(join(dir, 'pg-x'), undefined, 'restore', bk), /holds a postgres store and the target is sqlite/);
  ok(await admin(join(dir, 'pg-dst'), to, 'restore', bk));
  assert.deepEqual(await users(join(dir, 'pg-dst'), to), await users(data, from));
  refused(
    await admin(join(dir, 'pg-dst2'), from, 'restore', bk),
    /the database .* is not empty: restore into a new database/,
  );
  assert.ok(!existsSync(join(dir, 'pg-dst2')), 'nothing restored');
});
