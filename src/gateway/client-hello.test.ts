import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import tls from 'node:tls';
import { normalizeHost, parseClientHello } from './client-hello.js';

/** Captures the first bytes a real TLS client sends. */
async function captureHello(servername: string | undefined, alpn?: string[]): Promise<Buffer> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const got = new Promise<Buffer>((resolve) => {
    server.once('connection', (s) => {
      s.once('data', (d: Buffer) => {
        resolve(d);
        s.destroy();
      });
    });
  });
  const port = (server.address() as net.AddressInfo).port;
  const c = tls.connect({ host: '127.0.0.1', port, servername, ALPNProtocols: alpn });
  c.on('error', () => {});
  const hello = await got;
  c.destroy();
  server.close();
  return hello;
}

test('reads the SNI of a real ClientHello, also when it arrives a byte at a time', async () => {
  const hello = await captureHello('App-X.Unihost.test');
  assert.deepEqual(parseClientHello(hello), { kind: 'hello', sni: 'app-x.unihost.test', alpn: [] });
  for (let n = 0; n < hello.length; n++) assert.equal(parseClientHello(hello.subarray(0, n)).kind, 'more');
});

test('a ClientHello split across two TLS records is reassembled', async () => {
  const hello = await captureHello('split.unihost.test');
  const body = hello.subarray(5);
  const rec = (b: Buffer) => Buffer.concat([Buffer.from([0x16, 0x03, 0x01, b.length >> 8, b.length & 0xff]), b]);
  const two = Buffer.concat([rec(body.subarray(0, 40)), rec(body.subarray(40))]);
  assert.deepEqual(parseClientHello(two), { kind: 'hello', sni: 'split.unihost.test', alpn: [] });
});

test('reads the ALPN protocols the client offers (an ACME TLS-ALPN-01 validator offers acme-tls/1)', async () => {
  const hello = await captureHello('shop.example.test', ['acme-tls/1']);
  assert.deepEqual(parseClientHello(hello), { kind: 'hello', sni: 'shop.example.test', alpn: ['acme-tls/1'] });
  const browser = await captureHello('app.unihost.test', ['h2', 'http/1.1']);
  assert.deepEqual(parseClientHello(browser), { kind: 'hello', sni: 'app.unihost.test', alpn: ['h2', 'http/1.1'] });
});

test('no SNI, garbage, plain HTTP', async () => {
  assert.deepEqual(parseClientHello(await captureHello(undefined)), { kind: 'hello', sni: undefined, alpn: [] });
  assert.equal(parseClientHello(Buffer.from('GET / HTTP/1.1\r\n')).kind, 'http');
  assert.equal(parseClientHello(Buffer.from([0x00, 0x01, 0x02])).kind, 'garbage');
  assert.equal(parseClientHello(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0, 0, 0])).kind, 'garbage');
  assert.equal(parseClientHello(Buffer.from([0x16, 0x03, 0x01, 0xff, 0xff])).kind, 'garbage');
});

test('host names are normalized for lookup', () => {
  assert.equal(normalizeHost('Foo.Example.COM.:8080'), 'foo.example.com');
  assert.equal(normalizeHost('a b'), undefined);
  assert.equal(normalizeHost(''), undefined);
});
