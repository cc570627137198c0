import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as acme from 'acme-client';
import { testCa as leafCa, testLeaf, type TestCa } from '../../../test/helpers/certs.js';
import {
  BackendTable,
  backendPair,
  METRO,
  readUntil,
  request,
  route,
  testCa,
  tlsConnect,
  type TestBackend,
  testPlane,
} from '../testing.js';
import type { KeyPair, Route } from '../types.js';
import { HaproxyDataPlane } from './plane.js';
import { RuntimeApi } from './runtime.js';

const A = `app-aaaa1111.${METRO}`;
const C = 'shop.example.test';
const T = `tcp-1.${METRO}`;
const B1 = `b-one.${METRO}`;
const B2 = `b-two.${METRO}`;

/** The serial number of the certificate a client gets for `name` (unverified: only which one is served matters). */
async function servedSerial(port: number, name: string, o: { ALPNProtocols?: string[] } = {}): Promise<string> {
  const s = await tlsConnect(port, name, { rejectUnauthorized: false, ...o });
  const serial = s.getPeerX509Certificate()!.serialNumber;
  s.destroy();
  return serial.toLowerCase();
}

describe('gateway on HAProxy: certificates', () => {
  let a: [TestBackend, TestBackend];
  let t: [TestBackend, TestBackend];
  let dir: string;
  let plane: HaproxyDataPlane;
  let ca: TestCa;
  let metro: KeyPair;
  let port: number;
  const table = new BackendTable();
  const routes: Route[] = [];
  /** setRoutes is serialized after the certificate changes already queued: their end */
  const settle = async (): Promise<void> => {
    for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
  };

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-certs-'));
    a = await backendPair('http', 'A');
    t = await backendPair('tcp', 'T');
    table.set('gA', a);
    table.set('gT', t);
    routes.push(route('gA', 443, a[0].port, ['http', 'tls'], [A, C]), route('gT', 8443, t[0].port, ['tls'], [T]));
    ca = await leafCa();
    metro = await testCa();
    plane = await testPlane(dir, table, { tls: { cert: metro.cert, key: metro.key } });
    await settle();
    port = plane.boundPort(443)!;
  });
  after(async () => {
    await plane.close();
    for (const x of [...a, ...t]) await x.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('a pending name becoming valid, a renewal and the wildcard renewal: no reload, open connections kept', async () => {
    await assert.rejects(tlsConnect(port, C, { rejectUnauthorized: false }), /handshake failure/i);
    const pid = await plane.workerPid();
    const v1 = await testLeaf(ca, [C]);
    assert.deepEqual(plane.setCertificates([{ names: [C], pair: v1 }]), []);
    await settle();
    assert.equal(await servedSerial(port, C), v1.serial);
    // a keep-alive connection opened on v1 ...
    const open = await tlsConnect(port, C, { rejectUnauthorized: false });
    assert.equal(open.getPeerX509Certificate()!.serialNumber.toLowerCase(), v1.serial);
    const get = (): Promise<string> => {
      open.write(`GET /big?n=10 HTTP/1.1\r\nHost: ${C}\r\n\r\n`);
      return readUntil(open, (t) => t.endsWith('x'.repeat(10)));
    };
    assert.match(await get(), /^HTTP\/1.1 200/);
    // ... renewed (same names): new connections get v2, the open one goes on
    const v2 = await testLeaf(ca, [C]);
    plane.setCertificates([{ names: [C], pair: v2 }]);
    await settle();
    assert.equal(await servedSerial(port, C), v2.serial);
    assert.match(await get(), /^HTTP\/1.1 200/, 'the connection opened on v1 goes on');
    open.destroy();
    // the metro wildcard renewed
    const w = await testLeaf(ca, [`*.${METRO}`]);
    plane.setCertificate(w);
    await settle();
    assert.equal(await servedSerial(port, A), w.serial);
    assert.equal(await servedSerial(port, C), v2.serial);
    // the files on disk follow, so a reload or restart loads the same
    const list = await readFile(path.join(dir, 'haproxy', 'certs', 'crt-list.txt'), 'utf8');
    assert.match(list, new RegExp(` ${C.replace(/\./g, '\\.')}\\n`));
    plane.setCertificate({ cert: metro.cert, key: metro.key }); // back to the test CA's, which clients below trust
    await settle();
    assert.equal((await request(port, A, '/', { tls: true })).status, 200);
    assert.equal(await plane.workerPid(), pid, 'no reload happened');
  });

  test('a certificate with more names, and one taken away: the name is pending again', async () => {
    const pid = await plane.workerPid();
    const both = await testLeaf(ca, [C, `www.${C}`]);
    routes[0] = { ...routes[0]!, fqdns: [A, C, `www.${C}`] };
    plane.setCertificates([{ names: [C, `www.${C}`], pair: both }]);
    await settle();
    assert.equal(await servedSerial(port, `www.${C}`), both.serial);
    assert.equal(await servedSerial(port, C), both.serial);
    plane.setCertificates([]);
    await settle();
    await assert.rejects(tlsConnect(port, C, { rejectUnauthorized: false }), /handshake failure/i);
    assert.equal(await plane.workerPid(), pid, 'no reload happened');
  });

  test('TLS-ALPN-01: an acme-tls/1 client of a challenged name gets the challenge certificate; others never see it', async () => {
    const v = await testLeaf(ca, [C]);
    plane.setCertificates([{ names: [C], pair: v }]);
    const authz = { identifier: { type: 'dns', value: C } } as unknown as acme.Authorization;
    const [key, cert] = await acme.crypto.createAlpnCertificate(authz, 'token.thumbprint');
    await plane.setAlpnChallenges([
      { name: 'Shop.Example.Test', pair: { cert: cert.toString(), key: key.toString() } },
    ]);
    await settle();
    const s = await tlsConnect(port, C, { ALPNProtocols: ['acme-tls/1'], rejectUnauthorized: false });
    assert.equal(s.alpnProtocol, 'acme-tls/1');
    assert.equal(
      acme.crypto.isAlpnCertificateAuthorizationValid(s.getPeerX509Certificate()!.toString(), 'token.thumbprint'),
      true,
    );
    s.destroy();
    // an ordinary client of that name: its certificate, HTTP through the extra hop with the client's address
    assert.equal(await servedSerial(port, C, { ALPNProtocols: ['h2', 'http/1.1'] }), v.serial);
    const r = await request(port, A, '/x', { tls: true, headers: { 'x-forwarded-for': '6.6.6.6' } });
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.body).headers['x-forwarded-for'], '127.0.0.1');
    // acme-tls/1 for a name without a challenge: the usual answer
    const o = await tlsConnect(port, A, { ALPNProtocols: ['acme-tls/1', 'http/1.1'] });
    assert.notEqual(o.alpnProtocol, 'acme-tls/1');
    o.destroy();
    await assert.rejects(tlsConnect(port, `nobody.${METRO}`), /unrecognized name/i);
    // a TCP-mode TLS port behind the same pre-inspection
    const tcp = await tlsConnect(plane.boundPort(8443)!, T);
    assert.match(await readUntil(tcp, (x) => x.includes('hello from')), /hello from T[ab]/);
    tcp.destroy();
    await plane.setAlpnChallenges([]);
    await settle();
    const after = await tlsConnect(port, C, { ALPNProtocols: ['acme-tls/1'], rejectUnauthorized: false });
    assert.notEqual(after.alpnProtocol, 'acme-tls/1');
    assert.equal(after.getPeerX509Certificate()!.serialNumber.toLowerCase(), v.serial);
    after.destroy();
    assert.equal((await request(port, A, '/', { tls: true })).status, 200);
  });

  test('a certificate command HAProxy refuses (changed behind our back) ends in a full re-sync with a reload', async () => {
    const v = await testLeaf(ca, [C]);
    plane.setCertificates([{ names: [C], pair: v }]);
    await settle();
    const admin = new RuntimeApi(path.join(dir, 'haproxy', 'admin.sock'));
    const list = path.join(dir, 'haproxy', 'certs', 'crt-list.txt');
    const line = (await readFile(list, 'utf8')).split('\n').find((l) => l.endsWith(` ${C}`))!;
    const file = line.split(' ')[0]!;
    assert.match(await admin.send(`del ssl crt-list ${list} ${file}`), /deleted/i);
    const pid = await plane.workerPid();
    const both = await testLeaf(ca, [C, `www.${C}`]);
    plane.setCertificates([{ names: [C, `www.${C}`], pair: both }]); // removing the old line is refused
    await settle();
    assert.notEqual(await plane.workerPid(), pid, 'reloaded');
    assert.equal(await servedSerial(port, C), both.serial);
  });

  test('metro names come and go a crt-list line each, on one loaded wildcard: no reload', async () => {
    const pid = await plane.workerPid();
    const wildcard = new X509Certificate(metro.cert).serialNumber.toLowerCase();
    const listFile = path.join(dir, 'haproxy', 'certs', 'crt-list.txt');
    table.set('gB', a);
    routes.push(route('gB', 443, a[0].port, ['http', 'tls'], [B1, B2]));
    await settle();
    assert.equal(await servedSerial(port, B1), wildcard);
    assert.equal((await request(port, B2, '/', { tls: true })).status, 200);
    const lines = (await readFile(listFile, 'utf8')).split('\n');
    const files = [A, B1, B2].map((n) => lines.find((l) => l.endsWith(` ${n}`))?.split(' ')[0]);
    assert.ok(files[0]?.endsWith('/wildcard.pem'), `one line per name on the wildcard's file: ${lines.join(' | ')}`);
    assert.deepEqual(new Set(files).size, 1);
    // one name goes (its line is one of several naming the file), then the other with its group
    routes[routes.length - 1] = route('gB', 443, a[0].port, ['http', 'tls'], [B2]);
    await settle();
    await assert.rejects(tlsConnect(port, B1), /unrecognized name/i);
    assert.equal((await request(port, B2, '/', { tls: true })).status, 200);
    assert.equal((await request(port, A, '/', { tls: true })).status, 200);
    routes.pop();
    await settle();
    await assert.rejects(tlsConnect(port, B2), /unrecognized name/i);
    assert.equal((await request(port, A, '/', { tls: true })).status, 200);
    assert.doesNotMatch(await readFile(listFile, 'utf8'), /b-(one|two)\./);
    assert.equal(await plane.workerPid(), pid, 'no reload happened');
  });
});
