import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { DataPlane } from './types.js';
import {
  BackendTable,
  backendPair,
  readUntil,
  request,
  route,
  startGateway,
  tlsConnect,
  until,
  type TestBackend,
} from './testing.js';

const A = 'app-aaaa1111.unihost.test';
const T = 'db-tttt3333.unihost.test';

function connect(port: number, localAddress = '127.0.0.1'): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress }, () => resolve(s));
    s.once('error', reject);
  });
}

/**
 * Resolves with what the server sent before it closed the connection; a
 * reset counts as a close (HAProxy refuses a connection with a RST).
 */
const closedWith = async (s: net.Socket): Promise<string> => {
  let got = '';
  s.on('data', (d: Buffer) => (got += d.toString()));
  try {
    return await readUntil(s, () => false);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ECONNRESET') return got;
    throw e;
  }
};

describe('gateway: bad input and route changes', () => {
  let a: [TestBackend, TestBackend];
  let t: [TestBackend, TestBackend];
  let gw: DataPlane;
  let p80: number;
  let p8443: number;
  const table = new BackendTable();
  const routes = () => [route('gA', 80, a[0].port, ['http'], [A]), route('gT', 8443, t[0].port, ['tls'], [T])];

  before(async () => {
    a = await backendPair('http', 'A');
    t = await backendPair('tcp', 'T');
    await table.set('gA', a);
    await table.set('gT', t);
    gw = await startGateway(routes(), table, {
      limits: { headersTimeoutMs: 300, handshakeTimeoutMs: 300, maxConnectionsPerIp: 4 },
    });
    p80 = gw.boundPort(80)!;
    p8443 = gw.boundPort(8443)!;
  });
  after(async () => {
    await gw.close();
    for (const x of [...a, ...t]) await x.close();
  });

  test('slowloris: a request head that does not arrive in time gets 408 and is closed', async () => {
    const s = await connect(p80);
    s.write(`GET / HTTP/1.1\r\nHost: ${A}\r\n`);
    const timer = setInterval(() => s.write('X-a: b\r\n'), 100);
    const answer = await closedWith(s);
    clearInterval(timer);
    assert.match(answer, /^HTTP\/1.1 408/);
    assert.equal((await request(p80, A)).status, 200);
  });

  test('a TLS client that never says hello is closed', async () => {
    const s = await connect(p8443);
    assert.equal(await closedWith(s), '');
  });

  test('an oversized request head gets 431', async () => {
    const r = await request(p80, A, '/', { headers: { 'x-big': 'y'.repeat(20 * 1024) } });
    assert.equal(r.status, 431);
    assert.equal((await request(p80, A)).status, 200);
    // at the limit (16 KiB of header lines), in many small headers: just over → 431, just under → served
    const many = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-h${i}`, 'y'.repeat(180)]));
    const size = (h: Record<string, string>) => Object.entries(h).reduce((n, [k, v]) => n + k.length + v.length + 4, 0);
    const over = many(87);
    const under = many(84);
    assert.ok(size(over) > 16 * 1024 && size(under) < 16 * 1024 - 200);
    assert.equal((await request(p80, A, '/', { headers: over })).status, 431);
    assert.equal((await request(p80, A, '/', { headers: under })).status, 200);
  });

  test('per-client connection cap: the fifth connection from one address is refused, others are served', async () => {
    const held = await Promise.all([1, 2, 3, 4].map(() => connect(p80)));
    await until(() => gw.clientConnections(80) === 4, 'four connections accepted');
    // refused: closed at once, or reset (HAProxy), possibly before the connect completes
    const fifth = await connect(p80).then(closedWith, (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNRESET') return '';
      throw e;
    });
    assert.equal(fifth, '');
    // another client address is not affected
    const other = await connect(p80, '127.0.0.5');
    other.write(`GET / HTTP/1.1\r\nHost: ${A}\r\nConnection: close\r\n\r\n`);
    assert.match(await closedWith(other), /^HTTP\/1.1 200/);
    for (const s of held) s.destroy();
    await until(() => gw.clientConnections(80) === 0, 'held connections closed');
  });

  test('a backend that resets mid-response breaks only that response', async () => {
    const s = await connect(p80);
    s.write(`GET /reset HTTP/1.1\r\nHost: ${A}\r\n\r\n`);
    const got = await closedWith(s);
    assert.match(got, /^HTTP\/1.1 200[\s\S]*partial$/); // headers and the partial body, then the close
    assert.equal((await request(p80, A)).status, 200);
    await until(() => gw.connections('Aa') === 0 && gw.connections('Ab') === 0, 'no open work');
  });

  test('adding and removing a port leaves the other ports’ connections alone', async () => {
    const tcp = await tlsConnect(p8443, T);
    await readUntil(tcp, (x) => x.includes('\n'));
    // a request in flight on port 80 while ports come and go (each change reloads HAProxy)
    const ka = await connect(p80);
    ka.write(`GET /hold HTTP/1.1\r\nHost: ${A}\r\n\r\n`);
    await readUntil(ka, (x) => x.includes(':held'));

    const plus = await gw.setRoutes([...routes(), route('gA', 443, a[0].port, ['tls', 'http'], [A])]);
    assert.ok(plus.every((r) => r.error === undefined));
    const p443 = gw.boundPort(443)!;
    assert.equal((await request(p443, A, '/', { tls: true })).status, 200);
    await gw.setRoutes([route('gA', 80, a[0].port, ['http'], [A])]); // 443 and 8443 go away
    assert.equal(gw.boundPort(443), undefined);
    await assert.rejects(connect(p443));

    // the old worker finishes it: the response completes, then (HAProxy is stopping) the connection closes
    const rest = closedWith(ka);
    for (const x of a) x.release();
    assert.match(await rest, /done/);
    // the established TCP stream on the removed port 8443 still works
    tcp.write('still');
    assert.match(await readUntil(tcp, (x) => x.includes('still')), /T[ab]:still/);
    // the port itself serves new connections from the new worker
    assert.equal((await request(p80, A)).status, 200);
    tcp.destroy();
    await gw.setRoutes(routes());
    p8443 = gw.boundPort(8443)!;
  });

  test('a port whose routes are all kept keeps its connections across setRoutes', async () => {
    const tcp = await tlsConnect(p8443, T);
    await readUntil(tcp, (x) => x.includes('\n'));
    await gw.setRoutes([...routes(), route('gX', 9443, 1, ['tls'], ['x-xxxx.unihost.test'])]);
    await gw.setRoutes(routes());
    tcp.write('still');
    assert.match(await readUntil(tcp, (x) => x.includes('still')), /T[ab]:still/);
    tcp.destroy();
  });

  test('no sockets are left behind', async () => {
    await until(() => t[0].open() + t[1].open() === 0, 'TCP backend sockets closed');
    await until(() => gw.clientConnections(80) + gw.clientConnections(8443) === 0, 'client sockets closed');
    for (const id of ['Aa', 'Ab', 'Ta', 'Tb']) assert.equal(gw.connections(id), 0);
  });
});
