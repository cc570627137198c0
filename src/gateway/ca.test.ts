import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { ensureLocalCa } from './ca.js';

const DAY = 86_400_000;

test('creates a CA and a wildcard certificate once, reuses them, renews the leaf before expiry', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'uh-ca-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const first = await ensureLocalCa(dir, 'Metro.Test');
  assert.equal((await stat(path.join(dir, 'ca-key.pem'))).mode & 0o777, 0o600);
  assert.equal((await stat(first.keyPath)).mode & 0o777, 0o600);
  const ca = new X509Certificate(first.caCert);
  const leaf = new X509Certificate(first.cert);
  assert.ok(ca.ca);
  assert.ok(leaf.verify(ca.publicKey));
  assert.equal(leaf.checkHost('app-12345678.metro.test'), '*.metro.test');
  assert.equal(leaf.checkHost('a.b.metro.test'), undefined);
  // the CA may only vouch for the metro domain
  const nc = new x509.X509Certificate(first.caCert).getExtension('2.5.29.30');
  assert.ok(nc?.critical);

  const again = await ensureLocalCa(dir, 'metro.test');
  assert.equal(again.cert, first.cert);
  assert.equal(again.caCert, first.caCert);

  const later = await ensureLocalCa(dir, 'metro.test', new Date(Date.now() + 340 * DAY));
  assert.notEqual(later.cert, first.cert);
  assert.equal(later.caCert, first.caCert);
  assert.ok(new X509Certificate(later.cert).verify(ca.publicKey));

  const moved = await ensureLocalCa(dir, 'other.test');
  assert.notEqual(moved.caCert, first.caCert);
  assert.equal(new X509Certificate(moved.cert).checkHost('x.other.test'), '*.other.test');
});
