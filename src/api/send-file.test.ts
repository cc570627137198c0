import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { sendFileSpan } from './send-file.js';

const dir = mkdtempSync(join(tmpdir(), 'uh-send-file-'));
const file = join(dir, 'blob');
// several of its 2 MiB buffers, and a last part that fills none
const data = randomBytes(5 * 1024 * 1024 + 12345);
let server: Server;
let port = 0;
const results: { err?: string }[] = [];

before(async () => {
  writeFileSync(file, data);
  server = createServer((req, res) => {
    const u = new URL(req.url!, 'http://x');
    const start = Number(u.searchParams.get('start'));
    const length = Number(u.searchParams.get('length'));
    res.writeHead(200, { 'content-length': String(length) });
    const done: { err?: string } = {};
    results.push(done);
    sendFileSpan(res, u.searchParams.get('path') ?? file, start, length).catch((e: Error) => (done.err = e.message));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
after(() => {
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The body, or the error that ended it. */
function get(query: string, readBytes = Infinity): Promise<{ body: Buffer; error?: string }> {
  return new Promise((resolve) => {
    const req = request({ port, host: '127.0.0.1', path: `/?${query}` }, (res) => {
      const parts: Buffer[] = [];
      let got = 0;
      res.on('data', (c: Buffer) => {
        parts.push(c);
        got += c.length;
        if (got >= readBytes) {
          req.destroy();
          resolve({ body: Buffer.concat(parts), error: 'cut by the client' });
        }
      });
      res.on('end', () => resolve({ body: Buffer.concat(parts) }));
      res.on('error', (e) => resolve({ body: Buffer.concat(parts), error: e.message }));
    });
    req.on('error', (e) => resolve({ body: Buffer.alloc(0), error: e.message }));
    req.end();
  });
}

test('a span of a file is sent whole, across several buffers, from any offset', async () => {
  for (const [start, length] of [
    [0, data.length],
    [7, data.length - 7],
    [3 * 1024 * 1024 - 1, 2 * 1024 * 1024 + 2],
    [100, 10],
  ] as const) {
    const r = await get(`start=${start}&length=${length}`);
    assert.equal(r.error, undefined);
    assert.ok(r.body.equals(data.subarray(start, start + length)), `bytes ${start}+${length}`);
  }
});

test('a file shorter than the length sent: the response is cut and the send fails, naming the file', async () => {
  const n = results.length;
  const r = await get(`start=${data.length - 100}&length=4096`);
  assert.ok(r.error !== undefined || r.body.length < 4096, 'the client does not get a whole body');
  await new Promise((res) => setTimeout(res, 50));
  assert.match(results[n]?.err ?? '', /ended \d+ bytes before the length sent/);
});

test('a client that goes away ends the send without an error', async () => {
  const n = results.length;
  const r = await get(`start=0&length=${data.length}`, 64 * 1024);
  assert.equal(r.error, 'cut by the client');
  // the server side ends (its file closed) and does not count it as a failure
  await new Promise((res) => setTimeout(res, 200));
  assert.deepEqual(results[n], {});
});
