/**
 * `gateway.logErrors`: HAProxy's line for an abnormal request reaches the
 * daemon's log with its termination state; normal requests write nothing.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import pino from 'pino';
import { BackendTable, backendPair, METRO, request, route, testPlane, until } from '../testing.js';

test('logErrors: a refused instance is logged with its termination state, a served request is not', async () => {
  const lines: { msg: string; haproxy?: string }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      done();
    },
  });
  const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-logerr-'));
  const ok = await backendPair('http', 'OK');
  // a port nothing listens on: the instance refuses the connection
  const closed = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.2', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
  const table = new BackendTable();
  await table.set('good', ok);
  table.groups.set('bad', [{ instanceId: 'refuses', host: '127.0.0.2', state: 'running' }]);
  const plane = await testPlane(dir, table, { log: pino({ level: 'warn' }, sink), logErrors: true });
  try {
    const G = `good.${METRO}`;
    const B = `bad.${METRO}`;
    for (const r of await plane.setRoutes([
      route('good', 80, ok[0].port, ['http'], [G]),
      route('bad', 80, closed, ['http'], [B]),
    ]))
      assert.equal(r.error, undefined);
    const port = plane.boundPort(80)!;
    assert.equal((await request(port, G)).status, 200);
    const bad = await request(port, B);
    assert.equal(bad.status, 503);
    const abnormal = () => lines.find((l) => l.msg === 'gateway: abnormal request or connection');
    await until(() => abnormal() !== undefined, 'the abnormal request is logged');
    const line = abnormal()!;
    assert.match(line.haproxy!, / 503 /);
    assert.match(line.haproxy!, / SC/, 'termination state: the server side refused the connection');
    assert.ok(!lines.some((l) => l.haproxy?.includes(G) && / 200 /.test(l.haproxy)), 'no line for a normal request');
  } finally {
    await plane.close();
    for (const b of ok) await b.close();
    await rm(dir, { recursive: true, force: true });
  }
});
