import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { BackendTable, METRO, request, route, testPlane } from '../testing.js';
import { CURSOR_MARGIN, parseSourcePorts, SourcePorts } from './source-ports.js';

describe('source ports of the gateway’s connections to instances', () => {
  test('gateway.sourcePorts: a range of at least 2,048 ports within 1024-65535, or none', () => {
    assert.deepEqual(parseSourcePorts('16384-32767'), { low: 16384, high: 32767 });
    assert.equal(parseSourcePorts(''), null);
    for (const bad of ['80-5000', '60000-70000', '20000-21000', '30000-20000', '20000', 'a-b'])
      assert.throws(() => parseSourcePorts(bad), /gateway\.sourcePorts '.*' is not a range LOW-HIGH of at least 2048/);
  });

  test('each ring of an address starts where the last one stopped, and goes back to the start at the end', () => {
    const p = new SourcePorts({ address: '10.0.0.1', low: 20000, high: 24095 }, (low) => low);
    assert.equal(p.window, 2048);
    const a = '10.0.0.5:8080';
    assert.equal(p.option(a, 'b1/s'), ' source 10.0.0.1:20000-22047', 'a new address: where first() says');
    p.observe(a, 'b1/s', 100);
    p.removed(a, 'b1/s');
    const next = 20000 + 100 + CURSOR_MARGIN;
    assert.equal(p.option(a, 'b1/s'), ` source 10.0.0.1:${next}-${next + 2047}`, 'past the ports the last ring used');
    p.observe(a, 'b1/s', 1700);
    p.reload();
    // the cursor would pass 22048 (the last start whose window fits): back to the range's start
    assert.equal(p.option(a, 'b1/s'), ' source 10.0.0.1:20000-22047');
    // a ring that went round its window: the cursor is where it is now in it
    p.observe(a, 'b1/s', 2048 * 3 + 10);
    p.reload();
    assert.equal(
      p.option(a, 'b1/s'),
      ` source 10.0.0.1:${20000 + 10 + CURSOR_MARGIN}-${20000 + 10 + CURSOR_MARGIN + 2047}`,
    );
  });

  test('a second server to an address with a live ring gets none; other addresses their own', () => {
    const p = new SourcePorts({ address: '10.0.0.1', low: 20000, high: 24095 }, (low) => low);
    assert.match(p.option('10.0.0.5:8080', 'b1/s'), /source/);
    assert.equal(p.option('10.0.0.5:8080', 'b2/s'), '', 'two public ports to one instance port: the kernel picks');
    assert.match(p.option('10.0.0.5:9090', 'b2/t'), /source 10\.0\.0\.1:20000-/, 'another port: another 4-tuple');
    p.observe('10.0.0.5:8080', 'b2/s', 50); // the kernel-picked server's counts are not the ring's
    p.removed('10.0.0.5:8080', 'b1/s');
    assert.equal(
      p.option('10.0.0.5:8080', 'b2/s'),
      ` source 10.0.0.1:${20000 + CURSOR_MARGIN}-${20000 + CURSOR_MARGIN + 2047}`,
    );
  });

  test('HAProxy connects from the ring’s ports in order, and a reload’s new worker goes on past them', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-src-'));
    // an instance that closes each connection first, as c-http does: it sees the gateway's source port
    const server = http.createServer((req, res) => {
      res.setHeader('connection', 'close');
      res.end(String(req.socket.remotePort));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.2', r));
    const port = (server.address() as AddressInfo).port;
    const table = new BackendTable();
    table.groups.set('gS', [{ instanceId: 'iS', host: '127.0.0.2', state: 'running' }]);
    table.groups.set('gX', []);
    const S = `src-1.${METRO}`;
    const plane = await testPlane(dir, table, {
      sourcePorts: { address: '127.0.0.1', low: 20000, high: 24095 },
      minReloadGapMs: 0,
      statsIntervalMs: 50,
    });
    const seen = async (n: number): Promise<number[]> => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) {
        const r = await request(plane.boundPort(80)!, S, '/');
        assert.equal(r.status, 200);
        out.push(Number(r.body));
      }
      return out;
    };
    try {
      const routes = [route('gS', 80, port, ['http'], [S])];
      for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
      const first = await seen(20);
      const start = first[0]!;
      assert.ok(start >= 20000 && start <= 22048, `the first ring's start is in the range: ${start}`);
      assert.deepEqual(
        first,
        first.map((_, i) => start + i),
        'one port after the other: a port comes back only after the whole window',
      );
      // the stats poll counts the ring's connects; a reload (a new public port, another group's) starts a new worker
      await new Promise((r) => setTimeout(r, 300));
      const reloads = plane.reloads;
      for (const r of await plane.setRoutes([...routes, route('gX', 8080, port, ['http'], [`x-1.${METRO}`])]))
        assert.equal(r.error, undefined);
      assert.equal(plane.reloads, reloads + 1);
      const after = await seen(5);
      let next = start + 20 + CURSOR_MARGIN;
      if (next > 22048) next = 20000;
      assert.deepEqual(
        after,
        [0, 1, 2, 3, 4].map((i) => next + i),
        'the new worker goes on past the old ring',
      );
    } finally {
      await plane.close();
      server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
