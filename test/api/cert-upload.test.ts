import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';
import { testCa, testLeaf, type TestCa } from '../helpers/certs.js';

let h: Harness;
let alice: string;
let bob: string;
let ca: TestCa;
let caDir: string;
let logText = '';
/** every reply body of this file, to look for keys in */
const answers: string[] = [];

const { ok, entryError } = replyAsserts('certificates');

async function call(method: string, path: string, token: string, body?: unknown) {
  const r = await h.call(method, path, token, body);
  answers.push(r.text);
  return r;
}

/** The base64 body of a PEM key: what a leak would contain. */
const keyBody = (pem: string): string => pem.split('\n').filter((l) => l && !l.startsWith('-----'))[0]!;

before(async () => {
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logText += chunk.toString();
      cb();
    },
  });
  // the test CA stands for a public one: its certificates prove control of their names
  ca = await testCa();
  caDir = mkdtempSync(join(tmpdir(), 'uh-upload-ca-'));
  writeFileSync(join(caDir, 'ca.pem'), ca.pem);
  h = await startHarness({ acme: { uploadTrustedCa: join(caDir, 'ca.pem') } }, (s) => [simMachines(s)], {
    logger: pino({ level: 'trace' }, sink),
  });
  alice = await h.user('alice');
  bob = await h.user('bob');
});
after(async () => {
  await h.close();
  rmSync(caDir, { recursive: true, force: true });
});

describe('certificate uploads', () => {
  const keys: string[] = [];

  test('a good upload is valid and shows the real certificate; the key is a 0600 file', async () => {
    const leaf = await testLeaf(ca, ['shop.example.com', 'www.shop.example.com'], { serial: '0a1b2c3d' });
    keys.push(leaf.key);
    const [c] = ok(
      await call('POST', '/v1/certificates', alice, {
        name: 'shop',
        cn: 'shop.example.com.',
        chain: leaf.cert + ca.pem,
        pkey: leaf.key,
      }),
    );
    assert.equal(c.name, 'shop');
    assert.equal(c.state, 'valid');
    assert.equal(c.common_name, 'shop.example.com');
    assert.equal(c.subject, 'CN=shop.example.com');
    assert.equal(c.issuer, 'CN=unihost test CA');
    assert.equal(c.serial_number, '0a1b2c3d');
    const [got] = ok(await call('GET', '/v1/certificates', alice, { name: 'shop' }));
    assert.equal(got.state, 'valid');
    assert.equal(got.serial_number, '0a1b2c3d');
    assert.equal(got.not_after, new Date(Date.parse(got.not_after)).toISOString());
    assert.ok(Date.parse(got.not_after) > Date.now());
    assert.ok(Date.parse(got.not_before) < Date.now());
    assert.equal(got.validation, undefined);
    const file = join(h.dataDir, 'certs', c.uuid, 'key.pem');
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(statSync(join(h.dataDir, 'certs')).mode & 0o777, 0o700);
    // A group for a covered name uses it at once, by reference and by reuse.
    const [g] = ok(
      await call('POST', '/v1/services', alice, {
        services: [{ port: 443, handlers: ['http', 'tls'] }],
        domains: [{ name: 'www.shop.example.com.' }],
      }),
      'service_groups',
    );
    assert.deepEqual(g.domains[0].certificate, { uuid: c.uuid, name: 'shop', state: 'valid' });
    // In use: delete refused; after the group went, delete removes the files.
    entryError(await call('DELETE', '/v1/certificates', alice, { name: 'shop' }), 15, /still used/);
    ok(await call('DELETE', '/v1/services', alice, { uuid: g.uuid }), 'service_groups');
    ok(await call('DELETE', '/v1/certificates', alice, { name: 'shop' }));
    assert.throws(() => statSync(file), /ENOENT/);
  });

  test('common_name, wildcards and batches', async () => {
    const wild = await testLeaf(ca, ['*.apps.example.com']);
    const plain = await testLeaf(ca, ['api.example.com']);
    keys.push(wild.key, plain.key);
    const got = ok(
      await call('POST', '/v1/certificates', alice, [
        { name: 'wild', common_name: 'x.apps.example.com', chain: wild.cert, pkey: wild.key },
        { name: 'wild2', cn: '*.apps.example.com', chain: wild.cert, pkey: wild.key },
        { cn: 'api.example.com', chain: plain.cert, pkey: plain.key },
      ]),
    );
    assert.deepEqual(
      got.map((c) => c.common_name),
      ['x.apps.example.com', '*.apps.example.com', 'api.example.com'],
    );
    assert.match(got[2].name, /^cert-/);
  });

  test('bad uploads are refused with the problem named, and nothing is stored', async () => {
    const leaf = await testLeaf(ca, ['good.example.com']);
    const other = await testLeaf(ca, ['good.example.com']);
    const expired = await testLeaf(ca, ['old.example.com'], { from: -20, to: -1 });
    const future = await testLeaf(ca, ['new.example.com'], { from: 2, to: 20 });
    keys.push(leaf.key, other.key, expired.key, future.key);
    const cases: [object, number, RegExp][] = [
      [{ cn: 'good.example.com', chain: 'hello', pkey: leaf.key }, 7, /no PEM certificate/],
      [
        { cn: 'good.example.com', chain: leaf.cert.replace(/\n[A-Za-z0-9+/]{10}/, '\nAAAAAAAAAA'), pkey: leaf.key },
        7,
        /certificate 1 does not parse/,
      ],
      [{ cn: 'good.example.com', chain: leaf.cert, pkey: 'not a key' }, 7, /'pkey' is not a PEM private key/],
      [{ cn: 'good.example.com', chain: leaf.cert, pkey: other.key }, 7, /not the private key of the first/],
      [{ cn: 'old.example.com', chain: expired.cert, pkey: expired.key }, 7, /expired at/],
      [{ cn: 'new.example.com', chain: future.cert, pkey: future.key }, 7, /not valid before/],
      [{ cn: 'good.example.com', chain: ca.pem + leaf.cert, pkey: leaf.key }, 7, /not the private key/],
      [{ cn: 'good.example.com', chain: leaf.cert + other.cert, pkey: leaf.key }, 7, /did not issue/],
      [{ chain: leaf.cert, pkey: leaf.key }, 7, /'cn' \(or 'common_name'\) is required/],
      [{ cn: 'a.example.com', common_name: 'b.example.com', chain: leaf.cert, pkey: leaf.key }, 7, /disagree/],
    ];
    for (const [body, code, re] of cases) entryError(await call('POST', '/v1/certificates', alice, body), code, re);
    // A name the certificate does not cover: the spec's CertCNMisMatch (30).
    const r = await call('POST', '/v1/certificates', alice, [
      { name: 'ok1', cn: 'good.example.com', chain: leaf.cert, pkey: leaf.key },
      { name: 'bad1', cn: 'evil.example.com', chain: leaf.cert, pkey: leaf.key },
    ]);
    assert.equal(r.body.status, 'partial_success', r.text);
    const [good, bad] = r.body.data.certificates;
    assert.equal(good.status, 'success');
    assert.equal(bad.error, 30);
    assert.match(bad.message, /for good\.example\.com, not 'evil\.example\.com'/);
    entryError(
      await call('POST', '/v1/certificates', alice, {
        name: 'ok1',
        cn: 'good.example.com',
        chain: leaf.cert,
        pkey: leaf.key,
      }),
      23,
      /already exists/,
    );
    const names = ok(await call('GET', '/v1/certificates/list', alice)).map((c) => c.name);
    assert.ok(names.includes('ok1'));
    assert.ok(!names.includes('bad1'));
  });

  test('the certificates quota (code 19) bounds uploads', async () => {
    const t = await h.user('certer');
    await h.daemon.services.users.setQuotas('certer', { hard: { certificates: 1 } });
    const one = await testLeaf(ca, ['one.quota.example']);
    ok(await call('POST', '/v1/certificates', t, { cn: 'one.quota.example', chain: one.cert, pkey: one.key }));
    const two = await testLeaf(ca, ['two.quota.example']);
    entryError(
      await call('POST', '/v1/certificates', t, { cn: 'two.quota.example', chain: two.cert, pkey: two.key }),
      19,
      /quota 'certificates' exceeded: 1 used \+ 1 requested > 1 allowed/,
    );
    const list = await call('GET', '/v1/certificates', t);
    assert.equal(list.body.data.certificates.length, 1);
  });

  test("another account's certificate claims its name", async () => {
    const leaf = await testLeaf(ca, ['claimed.example.com']);
    keys.push(leaf.key);
    ok(await call('POST', '/v1/certificates', alice, { cn: 'claimed.example.com', chain: leaf.cert, pkey: leaf.key }));
    const r = await call('POST', '/v1/services', bob, {
      services: [{ port: 443, handlers: ['http', 'tls'] }],
      domains: [{ name: 'claimed.example.com.' }],
    });
    assert.match(r.text, /claimed by another account/);
    entryError(
      await call('POST', '/v1/certificates', bob, { cn: 'claimed.example.com', chain: leaf.cert, pkey: leaf.key }),
      24,
      /claimed by another account/,
    );
  });

  test('an upload that proves nothing (self-signed, an unknown CA, a forged signature) claims no name', async () => {
    const svc = [{ port: 443, handlers: ['http', 'tls'] }];
    // an unknown CA; and one that copies the trusted CA's name with keys of its own
    for (const [i, squatter] of [await testCa('CN=nobody trusts me'), await testCa()].entries()) {
      const name = `squat${i}.example.com`;
      const fake = await testLeaf(squatter, [name]);
      keys.push(fake.key);
      ok(await call('POST', '/v1/certificates', alice, { cn: name, chain: fake.cert, pkey: fake.key }));
      // it is alice's to serve, but bob is not kept from the name
      ok(await call('POST', '/v1/services', bob, { services: svc, domains: [{ name: `${name}.` }] }), 'service_groups');
    }
    // a chain that reaches a trusted root claims it
    const real = await testLeaf(ca, ['proven.example.com']);
    keys.push(real.key);
    ok(await call('POST', '/v1/certificates', bob, { cn: 'proven.example.com', chain: real.cert, pkey: real.key }));
    const r = await call('POST', '/v1/services', alice, { services: svc, domains: [{ name: 'proven.example.com.' }] });
    assert.match(r.text, /claimed by another account/);
  });

  test('no private key appears in any answer or log line', () => {
    assert.ok(keys.length >= 8);
    assert.ok(logText.length > 0, 'the log was captured');
    assert.match(logText, /certificate uploaded/);
    for (const k of keys) {
      const body = keyBody(k);
      for (const a of answers) assert.ok(!a.includes(body), 'a key is in an API answer');
      assert.ok(!logText.includes(body), 'a key is in the log');
      assert.ok(!logText.includes('PRIVATE KEY'), 'a PEM key is in the log');
    }
  });
});
