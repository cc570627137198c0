import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import tls from 'node:tls';
import pino from 'pino';
import { dataPlane } from '../../src/drivers.js';
import { GatewayController } from '../../src/reconcile/gateway.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';
import { testCa, testLeaf, type TestCa } from '../helpers/certs.js';

/** Custom domains served by SNI through the real gateway, with certificates made by a test CA. */

let h: Harness;
let gw: GatewayController;
let alice: string;
let ca: TestCa;
const { ok } = replyAsserts('certificates');

before(async () => {
  h = await startHarness({ gateway: { enabled: true, listen: '127.0.0.1', portOffset: -1 } }, (s) => {
    gw = new GatewayController(s, pino({ level: 'silent' }), dataPlane(s, pino({ level: 'silent' })));
    return [simMachines(s), gw];
  });
  alice = await h.user('alice');
  ca = await testCa();
});
after(async () => h.close());

/** A TLS handshake to the gateway's port 443 for `servername`, verified against `caPem`. */
function handshake(servername: string, caPem: string): Promise<tls.TLSSocket> {
  const port = gw.dataPlane!.boundPort(443)!;
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, servername, ca: caPem }, () => resolve(s));
    s.once('error', reject);
  });
}

async function upload(names: string[], serial?: string, rsa = false) {
  const leaf = await testLeaf(ca, names, { serial, rsa });
  const [c] = ok(await h.call('POST', '/v1/certificates', alice, { cn: names[0], chain: leaf.cert, pkey: leaf.key }));
  return c;
}

async function group(fqdn: string, certificate?: object) {
  const r = await h.call('POST', '/v1/services', alice, {
    services: [{ port: 443, handlers: ['http', 'tls'] }],
    domains: [{ name: fqdn, ...(certificate ? { certificate } : {}) }],
  });
  const [g] = ok(r, 'service_groups');
  await gw.settled();
  return g;
}

describe('custom domains on the gateway', () => {
  test('an uploaded certificate is served by SNI at once; open connections stay when others change', async () => {
    const c = await upload(['one.example.com'], '1001');
    await group('one.example.com.', { name: c.name });
    const s = await handshake('one.example.com', ca.pem);
    assert.equal(s.authorized, true);
    assert.equal(s.getPeerX509Certificate()!.serialNumber.toLowerCase(), '1001');
    // Another domain with another certificate appears; the open connection is not touched.
    const c2 = await upload(['two.example.com'], '1002');
    await group('two.example.com.', { uuid: c2.uuid });
    const s2 = await handshake('two.example.com', ca.pem);
    assert.equal(s2.getPeerX509Certificate()!.serialNumber.toLowerCase(), '1002');
    assert.equal(s.destroyed, false);
    assert.equal(s.writable, true);
    // The connection still speaks HTTP (no instance: 503 from the gateway).
    s.write('GET / HTTP/1.1\r\nHost: one.example.com\r\nConnection: close\r\n\r\n');
    const answer = await new Promise<string>((r) => {
      let t = '';
      s.on('data', (d: Buffer) => (t += d.toString()));
      s.on('end', () => r(t));
    });
    assert.match(answer, /^HTTP\/1\.1 503/);
    s2.destroy();
  });

  test('an RSA certificate is served by SNI too (the metro wildcard is ECDSA)', async () => {
    const c = await upload(['rsa.example.com'], '1003', true);
    await group('rsa.example.com.', { name: c.name });
    const s = await handshake('rsa.example.com', ca.pem);
    assert.equal(s.authorized, true);
    const peer = s.getPeerX509Certificate()!;
    assert.equal(peer.serialNumber.toLowerCase(), '1003');
    assert.equal(peer.publicKey.asymmetricKeyType, 'rsa');
    s.destroy();
  });

  test('a name without an issued certificate (pending) is refused with a TLS alert', async () => {
    const g = await group('pending.example.com.');
    assert.equal(g.domains[0].certificate.state, 'pending');
    await assert.rejects(handshake('pending.example.com', ca.pem), /handshake failure/);
    // A name nobody has is refused differently: unrecognized_name.
    await assert.rejects(handshake('nobody.example.com', ca.pem), /unrecognized name/);
  });

  test('an expired certificate file is not served; a renewed one (new serial, same id) replaces it', async () => {
    const c = await upload(['renew.example.com'], '2001');
    await group('renew.example.com.', { uuid: c.uuid });
    const before1 = await handshake('renew.example.com', ca.pem);
    assert.equal(before1.getPeerX509Certificate()!.serialNumber.toLowerCase(), '2001');
    // What the certificate controller does on renewal: new files, new serial in the record.
    const next = await testLeaf(ca, ['renew.example.com'], { serial: '2002' });
    await h.daemon.services.certificates.files.write(c.uuid, { cert: next.cert, key: next.key });
    await h.daemon.store.tx((tx) => tx.certificates.update(c.uuid, { serial_number: '2002' }));
    await gw.settled();
    const after1 = await handshake('renew.example.com', ca.pem);
    assert.equal(after1.getPeerX509Certificate()!.serialNumber.toLowerCase(), '2002');
    assert.equal(before1.destroyed, false, 'the connection made with the old certificate is kept');
    before1.destroy();
    after1.destroy();
  });

  test('PUT /v1/certificates: the replacement is served from the next handshake; open connections keep working', async () => {
    const c = await upload(['swap.example.com'], '3001');
    await group('swap.example.com.', { uuid: c.uuid });
    const before1 = await handshake('swap.example.com', ca.pem);
    assert.equal(before1.getPeerX509Certificate()!.serialNumber.toLowerCase(), '3001');
    const next = await testLeaf(ca, ['swap.example.com', 'www.swap.example.com'], { serial: '3002' });
    ok(await h.call('PUT', `/v1/certificates/${c.uuid}`, alice, { chain: next.cert, pkey: next.key }));
    await gw.settled();
    const after1 = await handshake('swap.example.com', ca.pem);
    assert.equal(after1.getPeerX509Certificate()!.serialNumber.toLowerCase(), '3002');
    // the connection made before still carries requests (no instance: the gateway's 503)
    before1.write('GET / HTTP/1.1\r\nHost: swap.example.com\r\nConnection: close\r\n\r\n');
    const answer = await new Promise<string>((r) => {
      let t = '';
      before1.on('data', (d: Buffer) => (t += d.toString()));
      before1.on('end', () => r(t));
    });
    assert.match(answer, /^HTTP\/1\.1 503/);
    after1.destroy();
  });

  test('deleting a certificate in use is refused', async () => {
    const c = await upload(['keep.example.com']);
    await group('keep.example.com.', { uuid: c.uuid });
    const r = await h.call('DELETE', '/v1/certificates', alice, { uuid: c.uuid });
    assert.equal(r.body.data.certificates[0].error, 15);
  });
});
