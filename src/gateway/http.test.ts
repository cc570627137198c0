import assert from 'node:assert/strict';
import http from 'node:http';
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
  until,
  type TestBackend,
} from './testing.js';

describe('gateway: HTTP on port 80', () => {
  let a: [TestBackend, TestBackend];
  let b: [TestBackend, TestBackend];
  let gw: DataPlane;
  let port: number;
  const table = new BackendTable();
  const A = 'app-aaaa1111.unihost.test';
  const B = 'shop.example.com';

  before(async () => {
    a = await backendPair('http', 'A');
    b = await backendPair('http', 'B');
    await table.set('gA', a);
    await table.set('gB', b);
    await table.set('gR', []);
    gw = await startGateway(
      [
        route('gA', 80, a[0].port, ['http'], [A], 'alice'),
        route('gB', 80, b[0].port, ['http'], [B], 'bob'),
        route('gR', 80, 443, ['http', 'redirect'], ['red-1.unihost.test'], 'alice'),
      ],
      table,
    );
    port = gw.boundPort(80)!;
  });
  after(async () => {
    await gw.close();
    for (const x of [...a, ...b]) await x.close();
  });

  test('balances requests round-robin over the running instances, over kept-alive upstream connections', async () => {
    const seen: string[] = [];
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    for (let i = 0; i < 6; i++) seen.push(JSON.parse((await request(port, A, '/', { agent })).body).b);
    agent.destroy();
    assert.deepEqual(seen.filter((s) => s === 'Aa').length, 3);
    assert.deepEqual(seen.filter((s) => s === 'Ab').length, 3);
    // 6 requests, at most a couple of upstream connections per backend: pooled, not one per request
    assert.ok(a[0].open() <= 2 && a[1].open() <= 2, `upstream sockets: ${a[0].open()}, ${a[1].open()}`);
  });

  test('routes by Host between two users’ groups, exact names only', async () => {
    assert.match(JSON.parse((await request(port, B)).body).b, /^B[ab]$/);
    assert.match(JSON.parse((await request(port, `${A.toUpperCase()}:80`)).body).b, /^A[ab]$/);
    const sub = await request(port, `x.${A}`);
    assert.equal(sub.status, 404);
  });

  test('unknown names get a 404 with a short text body', async () => {
    const r = await request(port, 'nobody-zzzz.unihost.test', '/x');
    assert.equal(r.status, 404);
    assert.match(r.headers['content-type'] ?? '', /text\/plain/);
    assert.match(r.body, /no service is published at nobody-zzzz\.unihost\.test/);
  });

  test('adds X-Forwarded-* (replacing what the client sent) and keeps the Host, method, path and body', async () => {
    const r = await request(port, A, '/p?q=1', {
      method: 'POST',
      body: 'hello',
      headers: { 'x-forwarded-for': '6.6.6.6', 'content-type': 'text/plain' },
    });
    const j = JSON.parse(r.body);
    assert.equal(j.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal(j.headers['x-forwarded-proto'], 'http');
    assert.equal(j.headers['x-forwarded-host'], A);
    assert.equal(j.headers.host, A);
    assert.equal(j.method, 'POST');
    assert.equal(j.url, '/p?q=1');
    assert.equal(j.body, 'hello');
    assert.deepEqual(r.headers['set-cookie'], ['a=1', 'b=2']);
  });

  test('redirect answers 301 (308 for POST) to https keeping host, path and query', async () => {
    const r = await request(port, 'red-1.unihost.test', '/a/b?c=d&e=f');
    assert.equal(r.status, 301);
    assert.equal(r.headers.location, 'https://red-1.unihost.test/a/b?c=d&e=f');
    const p = await request(port, 'RED-1.unihost.test:80', '/form', { method: 'POST', body: 'x' });
    assert.equal(p.status, 308);
    assert.equal(p.headers.location, 'https://red-1.unihost.test/form');
  });

  test('a stopped instance is taken out; an idempotent request to a dead backend fails over', async () => {
    // b[1] "crashes" while the table still says running: GETs fail over to b[0]
    await b[1].close();
    for (let i = 0; i < 4; i++) {
      const r = await request(port, B);
      assert.equal(r.status, 200);
      assert.equal(JSON.parse(r.body).b, 'Ba');
    }
    // a POST whose connection is refused was not sent: it goes to the other instance too
    for (let i = 0; i < 2; i++) assert.equal((await request(port, B, '/', { method: 'POST', body: 'x' })).status, 200);
    // a POST that reached an instance and got no answer is not sent again: 502
    const r502 = await request(port, B, '/drop', { method: 'POST', body: 'x' });
    assert.equal(r502.status, 502);
    assert.equal(b[0].dropped() + b[1].dropped(), 1);
    // the controller marks it stopped: no more attempts, no more 502s
    await table.setState('Bb', 'other');
    for (let i = 0; i < 4; i++) assert.equal((await request(port, B, '/', { method: 'POST', body: 'x' })).status, 200);
    // no running instance at all: 503
    await table.setState('Ba', 'other');
    const r = await request(port, B);
    assert.equal(r.status, 503);
    assert.match(r.body, /no instance of it is running/);
    await table.setState('Ba', 'running');
  });

  test('drain: no new requests go to a draining instance; connections() drops to 0 when its last request ends', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    // a long response held open on whichever backend the balancer picks
    const held = new Promise<{ id: string; rest: Promise<string> }>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port, path: '/hold', headers: { host: A }, agent: false }, (res) => {
          let text = '';
          let first = true;
          const rest = new Promise<string>((r) => res.on('end', () => r(text)));
          res.on('data', (d: Buffer) => {
            text += d.toString();
            if (first) {
              first = false;
              resolve({ id: text.split(':')[0]!, rest });
            }
          });
        })
        .on('error', reject);
    });
    const h = await held;
    const other = h.id === 'Aa' ? 'Ab' : 'Aa';
    assert.equal(gw.connections(h.id), 1);
    const drained = gw.drain(h.id, 10_000);
    await table.setState(h.id, 'draining');
    for (let i = 0; i < 4; i++) assert.equal(JSON.parse((await request(port, A, '/', { agent })).body).b, other);
    assert.equal(gw.connections(h.id), 1);
    a.find((x) => x.id === h.id)!.release();
    assert.match(await h.rest, /done/);
    assert.equal(await drained, 'idle');
    assert.equal(gw.connections(h.id), 0);
    const c = gw.counters();
    assert.ok(c.instances[h.id]!.requests >= 1);
    assert.ok(c.groups.gA!.bytesOut > 0 && c.groups.gA!.lastActivity > 0);
    await table.setState(h.id, 'running');
    agent.destroy();
  });

  test('drain timeout cuts what is left', async () => {
    const res = new Promise<string>((resolve) => {
      http
        .get({ host: '127.0.0.1', port, path: '/hold', headers: { host: A }, agent: false }, (r) => {
          r.on('data', () => {});
          r.on('error', () => resolve('cut'));
          r.on('end', () => resolve('ended'));
        })
        .on('error', () => resolve('cut'));
    });
    await until(() => gw.connections('Aa') + gw.connections('Ab') === 1, 'held request');
    const id = gw.connections('Aa') === 1 ? 'Aa' : 'Ab';
    assert.equal(await gw.drain(id, 50), 'timeout');
    assert.equal(gw.connections(id), 0);
    assert.equal(await res, 'cut');
    for (const x of a) x.release();
  });

  test('WebSocket upgrade passes through both ways, with X-Forwarded-For', async () => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.write(
      `GET /chat HTTP/1.1\r\nHost: ${A}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
    const head = await readUntil(s, (t) => t.includes('\r\n\r\n'));
    assert.match(head, /^HTTP\/1.1 101/);
    assert.match(head, /Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=/i);
    assert.match(head, /X-Seen-Xff: 127\.0\.0\.1/i);
    s.write('ping');
    const echo = await readUntil(s, (t) => t.includes('ping'));
    assert.match(echo, /^A[ab]:ping$/);
    const id = echo.split(':')[0]!;
    await until(() => gw.connections(id) === 1, 'the tunnel counted');
    s.destroy();
    await until(() => gw.connections(id) === 0, 'tunnel closed');
  });
});
