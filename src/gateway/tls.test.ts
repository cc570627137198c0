import tls from 'node:tls';
import http2 from 'node:http2';
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import * as acme from 'acme-client';
import type { HaproxyDataPlane } from './haproxy/plane.js';
import type { DataPlane, Route } from './types.js';
import {
  BackendTable,
  backendPair,
  readUntil,
  request,
  route,
  startGateway,
  testCa,
  tlsConnect,
  until,
  type TestBackend,
} from './testing.js';

describe('gateway: TLS termination, SNI routing, TCP mode', () => {
  let a: [TestBackend, TestBackend];
  let b: [TestBackend, TestBackend];
  let t: [TestBackend, TestBackend];
  let gw: DataPlane;
  let p443: number;
  let p8443: number;
  const table = new BackendTable();
  const A = 'app-aaaa1111.unihost.test';
  const B = 'bob-bbbb2222.unihost.test';
  const T = 'db-tttt3333.unihost.test';

  before(async () => {
    a = await backendPair('http', 'A');
    b = await backendPair('http', 'B');
    t = await backendPair('tcp', 'T');
    await table.set('gA', a);
    await table.set('gB', b);
    await table.set('gT', t);
    gw = await startGateway(
      [
        route('gA', 443, a[0].port, ['tls', 'http'], [A], 'alice'),
        route('gB', 443, b[0].port, ['tls', 'http'], [B], 'bob'),
        route('gT', 8443, t[0].port, ['tls'], [T], 'bob'),
      ],
      table,
    );
    p443 = gw.boundPort(443)!;
    p8443 = gw.boundPort(8443)!;
  });
  after(async () => {
    await gw.close();
    for (const x of [...a, ...b, ...t]) await x.close();
  });

  for (const version of ['TLSv1.3', 'TLSv1.2'] as const) {
    test(`${version}: a client trusting the local CA reaches the right user's group by SNI`, async () => {
      const s = await tlsConnect(p443, A, {
        minVersion: version,
        maxVersion: version,
        ALPNProtocols: ['http/1.1'],
      });
      assert.equal(s.getProtocol(), version);
      assert.equal(s.alpnProtocol, 'http/1.1');
      assert.equal(s.authorized, true);
      s.write(`GET /v HTTP/1.1\r\nHost: ${A}\r\nConnection: close\r\n\r\n`);
      const text = await readUntil(s, () => false);
      assert.match(text, /^HTTP\/1.1 200/);
      assert.match(text, /"b":"A[ab]"/);
      assert.match(text, /"x-forwarded-proto":"https"/);
    });
  }

  test('HTTP/2 clients get h2 by ALPN; requests and bodies reach the backend as HTTP/1.1', async () => {
    const ca = (await testCa()).caCert;
    const session = http2.connect(`https://127.0.0.1:${p443}`, { ca, servername: A });
    try {
      const call = (headers: http2.OutgoingHttpHeaders, body?: string) =>
        new Promise<{ status: number; json: Record<string, unknown> }>((resolve, reject) => {
          const st = session.request({ ':authority': A, ...headers });
          let status = 0;
          const got: Buffer[] = [];
          st.on('response', (h) => (status = Number(h[':status'])));
          st.on('data', (d: Buffer) => got.push(d));
          st.on('end', () => resolve({ status, json: JSON.parse(Buffer.concat(got).toString()) }));
          st.on('error', reject);
          st.end(body);
        });
      const g = await call({ ':path': '/h2?x=1' });
      assert.equal(g.status, 200);
      assert.equal((session.socket as tls.TLSSocket).alpnProtocol, 'h2');
      assert.match(String(g.json.b), /^A[ab]$/);
      assert.match(JSON.stringify(g.json), /"x-forwarded-proto":"https"/);
      assert.match(JSON.stringify(g.json), new RegExp(`"x-forwarded-host":"${A.replaceAll('.', '\\.')}"`));
      const p = await call({ ':method': 'POST', ':path': '/post', 'content-type': 'text/plain' }, 'hello over h2');
      assert.equal(p.status, 200);
      assert.equal(p.json.method, 'POST');
      assert.equal(p.json.body, 'hello over h2');
    } finally {
      session.close();
    }
  });

  test('two groups on 443 are told apart by SNI; Host must agree with SNI (421)', async () => {
    const rb = await request(p443, B, '/', { tls: true });
    assert.match(JSON.parse(rb.body).b, /^B[ab]$/);
    const mis = await request(p443, A, '/', { tls: true, headers: { host: B } });
    assert.equal(mis.status, 421);
  });

  test('an unknown name gets a TLS unrecognized_name alert, no certificate', async () => {
    await assert.rejects(tlsConnect(p443, 'nobody-zzzz.unihost.test'), (e: NodeJS.ErrnoException) => {
      assert.match(`${e.code} ${e.message}`, /UNRECOGNIZED_NAME|unrecognized name/i);
      return true;
    });
    // no SNI at all (client dials the IP) is refused the same way
    await assert.rejects(tlsConnect(p443, '', { servername: undefined, checkServerIdentity: () => undefined }));
  });

  test('TLS-ALPN-01: an acme-tls/1 client gets the challenge certificate; other clients never see it', async () => {
    const authz = { identifier: { type: 'dns', value: 'shop.example.test' } } as unknown as acme.Authorization;
    const [key, cert] = await acme.crypto.createAlpnCertificate(authz, 'token.thumbprint');
    await gw.setAlpnChallenges([{ name: 'Shop.Example.Test', pair: { cert: cert.toString(), key: key.toString() } }]);
    try {
      const v = await tlsConnect(p443, 'shop.example.test', {
        ALPNProtocols: ['acme-tls/1'],
        rejectUnauthorized: false,
      });
      assert.equal(v.alpnProtocol, 'acme-tls/1');
      const pem = v.getPeerX509Certificate()!.toString();
      assert.equal(acme.crypto.isAlpnCertificateAuthorizationValid(pem, 'token.thumbprint'), true);
      v.destroy();
      // an ordinary client asking for that name: no route on this port, so the usual refusal
      await assert.rejects(tlsConnect(p443, 'shop.example.test'), /UNRECOGNIZED_NAME|unrecognized name/i);
      // acme-tls/1 for a name without a challenge: the usual answer (A's certificate, no acme-tls/1)
      const a = await tlsConnect(p443, A, { ALPNProtocols: ['acme-tls/1', 'http/1.1'] });
      assert.notEqual(a.alpnProtocol, 'acme-tls/1');
      a.destroy();
    } finally {
      await gw.setAlpnChallenges([]);
    }
    await assert.rejects(
      tlsConnect(p443, 'shop.example.test', { ALPNProtocols: ['acme-tls/1'], rejectUnauthorized: false }),
      /UNRECOGNIZED_NAME|unrecognized name/i,
    );
  });

  test('garbage and plain HTTP on a TLS port are refused and closed; the port keeps working', async () => {
    const g = net.connect({ host: '127.0.0.1', port: p443 });
    g.write(Buffer.from([0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3]));
    const alert = await new Promise<Buffer>((resolve) => {
      const got: Buffer[] = [];
      g.on('data', (d: Buffer) => got.push(d));
      g.on('close', () => resolve(Buffer.concat(got)));
    });
    assert.equal(alert[0], 0x15); // alert record
    const h = net.connect({ host: '127.0.0.1', port: p443 });
    h.write(`GET / HTTP/1.1\r\nHost: ${A}\r\n\r\n`);
    // HAProxy closes a connection that does not start with a ClientHello without an answer
    assert.equal(await readUntil(h, () => false).catch((e: NodeJS.ErrnoException) => e.code), '');
    assert.equal((await request(p443, A, '/', { tls: true })).status, 200);
  });

  test('TCP mode balances per connection and pipes bytes both ways after TLS', async () => {
    const greetings: string[] = [];
    const socks = [];
    for (let i = 0; i < 4; i++) {
      const s = await tlsConnect(p8443, T);
      assert.equal(s.alpnProtocol, false);
      greetings.push((await readUntil(s, (x) => x.includes('\n'))).trim());
      socks.push(s);
    }
    assert.deepEqual(greetings.filter((g) => g === 'hello from Ta').length, 2);
    assert.deepEqual(greetings.filter((g) => g === 'hello from Tb').length, 2);
    await until(() => gw.connections('Ta') === 2, 'two connections to Ta counted');
    socks[0]!.write('abc');
    assert.match(await readUntil(socks[0]!, (x) => x.includes('abc')), /T[ab]:abc/);
    // a draining instance gets no new connection; its open ones stay
    await table.setState('Ta', 'draining');
    for (let i = 0; i < 2; i++) {
      const s = await tlsConnect(p8443, T);
      assert.equal((await readUntil(s, (x) => x.includes('\n'))).trim(), 'hello from Tb');
      s.destroy();
    }
    assert.equal(gw.connections('Ta'), 2);
    for (const s of socks) s.destroy();
    await until(() => gw.connections('Ta') === 0 && gw.connections('Tb') === 0, 'connections closed');
    const c = gw.counters();
    assert.ok(c.instances.Ta!.bytesIn >= 3 && c.instances.Ta!.bytesOut > 0);
    assert.equal(c.groups.gT!.openConnections, 0);
    await table.setState('Ta', 'running');
  });

  test('TCP mode with no running instance closes the connection after the handshake', async () => {
    await table.setState('Ta', 'other');
    await table.setState('Tb', 'other');
    const s = await tlsConnect(p8443, T);
    assert.equal(await readUntil(s, () => false), '');
    await table.setState('Ta', 'running');
    await table.setState('Tb', 'running');
  });
});

describe('gateway: an instance taken out ahead of its stop', () => {
  let t: [TestBackend, TestBackend];
  let gw: HaproxyDataPlane;
  const table = new BackendTable();
  const T = 'db-tttt4444.unihost.test';
  const gT = (): Route => route('gT', 8443, t[0].port, ['tls'], [T]);

  before(async () => {
    t = await backendPair('tcp', 'T');
    await table.set('gT', [t[0]]);
    // reloads a second apart: a change of shape waits its turn, as on a busy platform
    gw = await startGateway([gT()], table, { minReloadGapMs: 1000 });
  });
  after(async () => {
    await gw.close();
    for (const x of t) await x.close();
  });

  test('stays out when it leaves during a reload: the reloaded HAProxy sends it no connection', async () => {
    const greeting = async () => {
      const s = await tlsConnect(gw.boundPort(8443)!, T);
      const text = await readUntil(s, (x) => x.includes('\n'));
      s.destroy();
      return text.trim();
    };
    assert.equal(await greeting(), 'hello from Ta');
    // two new ports: the first reload goes at once, the second waits for the gap
    await gw.setRoutes([gT(), route('gX', 9443, 1, ['tls'], ['x-xxxx.unihost.test'])]);
    const read = table.reads;
    const reloading = gw.setRoutes([
      gT(),
      route('gX', 9443, 1, ['tls'], ['x-xxxx.unihost.test']),
      route('gY', 9444, 1, ['tls'], ['y-yyyy.unihost.test']),
    ]);
    // the owner's table, read before the stop, still has it running while the reload waits
    // (waited for, not slept on: a loaded machine can start the apply late)
    await until(() => table.reads > read, 'the apply read the table');
    await gw.leave('Ta');
    await reloading;
    assert.equal(gw.boundPort(9444) !== undefined, true, 'the reload took place');
    assert.equal(await greeting(), '', 'no running instance: closed after the handshake');
    // the next table that has it running (a read after the leave: it runs again) brings it back
    await gw.setRoutes([gT()]);
    assert.equal(await greeting(), 'hello from Ta');
  });
});
