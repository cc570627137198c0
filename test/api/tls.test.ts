import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, request } from 'undici';
import { startHarness, type Harness } from '../helpers/harness.js';
import { loadConfig } from '../../src/config.js';

const dir = mkdtempSync(join(tmpdir(), 'unihost-tls-'));
const cert = join(dir, 'cert.pem');
const key = join(dir, 'key.pem');
let h: Harness;
let token: string;

before(async () => {
  // A self-signed certificate for the loopback address: the test trusts exactly it.
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
  ], { stdio: 'ignore' }); // prettier-ignore
  h = await startHarness({ tls: { cert, key } });
  token = await h.user('tls');
});
after(async () => {
  await h.close();
  rmSync(dir, { recursive: true, force: true });
});

test('the API answers over HTTPS to a client that trusts the certificate', async () => {
  assert.match(h.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  const dispatcher = new Agent({ connect: { ca: readFileSync(cert) } });
  try {
    const r = await request(`${h.url}/v1/instances`, { headers: { authorization: `Bearer ${token}` }, dispatcher });
    assert.equal(r.statusCode, 200);
    assert.equal(((await r.body.json()) as { status: string }).status, 'success');
    const anon = await request(`${h.url}/`, { dispatcher });
    assert.equal(anon.statusCode, 401);
    await anon.body.dump();
  } finally {
    await dispatcher.close();
  }
});

test('a client that does not trust the certificate is refused, and plain HTTP gets no API', async () => {
  await assert.rejects(request(`${h.url}/`), /self[- ]signed|certificate/i);
  const plain = h.url.replace('https:', 'http:');
  const r = await request(`${plain}/`).then(
    (x) => x.statusCode,
    () => 'refused',
  );
  assert.equal(r, 'refused');
});

test('--tls-cert/--tls-key, the env and the config file meet in config.tls; one without the other is refused', async () => {
  const c = loadConfig({ tls: { cert: '/flag/cert.pem', key: undefined } }, { UNIHOST_TLS_KEY: '/env/key.pem' });
  assert.deepEqual(c.tls, { cert: '/flag/cert.pem', key: '/env/key.pem' });
  await assert.rejects(startHarness({ tls: { cert, key: '' } }), /TLS needs both a certificate .* and its key/);
  await assert.rejects(startHarness({ tls: { cert, key: join(dir, 'nope.pem') } }), /cannot read the TLS key/);
});
