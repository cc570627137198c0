import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { describe, test } from 'node:test';
import { waitForPort } from './probe.js';

const listen = (server: Server, port = 0): Promise<number> =>
  new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));

describe('waitForPort (readiness probe)', () => {
  test('resolves once a listener opens on the port, and sends no data', async () => {
    // find a free port, then close it so the first tries are refused
    const probe = createServer();
    const port = await listen(probe);
    await new Promise((r) => probe.close(r));
    const ac = new AbortController();
    let resolved = false;
    const p = waitForPort('127.0.0.1', port, ac.signal, { intervalMs: 5 }).then(() => (resolved = true));
    await new Promise((r) => setTimeout(r, 60));
    assert.equal(resolved, false, 'nothing listens yet');
    const received: Buffer[] = [];
    const server = createServer((s) => s.on('data', (d) => received.push(d)));
    await listen(server, port);
    await p;
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(Buffer.concat(received).length, 0, 'the probe sends no application data');
    await new Promise((r) => server.close(r));
  });

  test('rejects with the abort reason when aborted', async () => {
    const probe = createServer();
    const port = await listen(probe);
    await new Promise((r) => probe.close(r));
    const ac = new AbortController();
    const p = waitForPort('127.0.0.1', port, ac.signal);
    setTimeout(() => ac.abort(new Error('VM ended')), 30);
    await assert.rejects(p, /VM ended/);
  });
});
