import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseStoreUrl, redact } from './url.js';

const DB = '/var/lib/unihost/unihost.db';

test('empty: SQLite in the data dir', () => {
  assert.deepEqual(parseStoreUrl('', DB), { kind: 'sqlite', path: DB });
  assert.deepEqual(parseStoreUrl('  ', DB), { kind: 'sqlite', path: DB });
});

test('a unix-socket URL: the user, no host, the socket dir as host=', () => {
  const t = parseStoreUrl('postgresql://unihost@/unihost?host=/run/postgresql', DB);
  assert.equal(t.kind, 'postgres');
  if (t.kind !== 'postgres') return;
  assert.deepEqual(
    [t.host, t.port, t.database, t.user, t.password, t.ssl],
    ['/run/postgresql', 5432, 'unihost', 'unihost', '', false],
  );
  assert.equal(t.display, "PostgreSQL on the socket /run/postgresql/.s.PGSQL.5432, database 'unihost' as 'unihost'");
});

test('a TCP URL with a password, port and options; the password never in the description', () => {
  const t = parseStoreUrl(
    'postgres://app:s3cr%40t@db.example:6543/prod?sslmode=require&connect_timeout=5&pool_max=20',
    DB,
  );
  assert.equal(t.kind, 'postgres');
  if (t.kind !== 'postgres') return;
  assert.deepEqual(
    [t.host, t.port, t.database, t.user, t.password, t.ssl, t.connectTimeoutS, t.poolMax],
    ['db.example', 6543, 'prod', 'app', 's3cr@t', 'require', 5, 20],
  );
  assert.doesNotMatch(t.display, /s3cr/);
  assert.equal(redact('postgres://app:s3cr%40t@db.example/prod'), 'postgres://app:***@db.example/prod');
});

test('typos in the scheme or the options are refused with the reason, never with the password', () => {
  const cases: [string, RegExp][] = [
    ['postgress://u@h/db', /unknown scheme 'postgress:' \(use postgres:\/\/ or postgresql:\/\//],
    ['mysql://u:pw@h/db', /unknown scheme 'mysql:'/],
    ['/var/lib/unihost/x.db', /it is not a URL/],
    ['postgresql:u@h/db', /must be followed by '\/\/'/],
    ['postgresql://u@h/db?sslmod=require', /unknown option 'sslmod' \(known: host .*sslmode/],
    ['postgresql://u@h/db?sslmode=maybe', /sslmode 'maybe' is not one of disable, prefer, require, verify-full/],
    ['postgresql://u@h/db?port=99999', /port '99999' is not a whole number from 1 to 65535/],
    ['postgresql://u@h/db?connect_timeout=x', /connect_timeout 'x' is not a whole number/],
    ['postgresql://u@h/', /names no database/],
    ['postgresql://h/db', /names no user/],
    ['postgresql://u@/db', /names no host/],
    ['postgresql://u@h/db?host=/a&host=/b', /option 'host' is given more than once/],
    ['postgresql://u@h/db?host=sock', /the host is given twice/],
    ['postgresql://u:hunter2@h/db?bogus=1', /unknown option 'bogus'/],
  ];
  for (const [url, re] of cases) {
    assert.throws(() => parseStoreUrl(url, DB), re, url);
    try {
      parseStoreUrl(url, DB);
    } catch (e) {
      assert.doesNotMatch((e as Error).message, /hunter2|:pw@/, 'the password is not repeated');
    }
  }
});
