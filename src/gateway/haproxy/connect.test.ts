import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { connectWithRetries } from './connect.js';

let server: net.Server;
let port: number;
before(async () => {
  server = net.createServer((c) => c.end('hello'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as net.AddressInfo).port;
});
after(() => server.close());

/** A socket that never connects: what a SYN the guest ignores looks like to the caller. */
const silent = (): net.Socket => new net.Socket();

test('an unanswered try is given up after its timeout and made again on a new connection', async () => {
  let dials = 0;
  const retried: string[] = [];
  const t0 = Date.now();
  const policy = { timeoutMs: 50, retries: 4, onRetry: (e: Error) => void retried.push(e.message) };
  const s = await connectWithRetries('127.0.0.1', port, policy, (o) => (++dials <= 2 ? silent() : net.connect(o)));
  assert.equal(dials, 3);
  assert.deepEqual(retried, [
    `no answer from 127.0.0.1:${port} within 50 ms`,
    `no answer from 127.0.0.1:${port} within 50 ms`,
  ]);
  assert.ok(Date.now() - t0 >= 100, 'two timeouts were waited out');
  const got = await new Promise<string>((r) => s.once('data', (d) => r(String(d))));
  assert.equal(got, 'hello', 'the socket handed back is the connected one');
  s.destroy();
});

test('after its retries it fails with the last error, naming the address', async () => {
  let dials = 0;
  await assert.rejects(
    connectWithRetries('127.0.0.1', port, { timeoutMs: 20, retries: 2 }, () => (dials++, silent())),
    new RegExp(`no answer from 127\\.0\\.0\\.1:${port} within 20 ms`),
  );
  assert.equal(dials, 3, 'one try and two retries');
});

test('a refused connect is tried again after the pause, then fails with ECONNREFUSED', async () => {
  const closed = net.createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const dead = (closed.address() as net.AddressInfo).port;
  await new Promise<void>((r) => closed.close(() => r()));
  let dials = 0;
  const t0 = Date.now();
  await assert.rejects(
    connectWithRetries('127.0.0.1', dead, { timeoutMs: 1000, retries: 2, refusedDelayMs: 40 }, (o) => {
      dials++;
      return net.connect(o);
    }),
    { code: 'ECONNREFUSED' },
  );
  assert.equal(dials, 3);
  assert.ok(Date.now() - t0 >= 80, 'the pause between refused tries');
});
