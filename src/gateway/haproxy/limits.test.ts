/**
 * A service group's soft and hard limits (PATCH /v1/services) on real
 * HAProxy: beyond the soft limit per instance requests wait in the group's
 * queue and are served in order; beyond the hard limit (in service and
 * queued, per usable instance) they are refused at once. Instances added
 * at run time (`add server`) carry the limit too.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  BackendTable,
  backendPair,
  METRO,
  readUntil,
  request,
  route,
  testPlane,
  tlsConnect,
  until,
  type TestBackend,
} from '../testing.js';
import type { Route } from '../types.js';
import type { HaproxyDataPlane } from './plane.js';
import { RuntimeApi } from './runtime.js';

const L = `limited-1.${METRO}`;
const T = `tcp-limited-1.${METRO}`;

/** A request to /hold whose response head has arrived (the backend serves it), or that is still waiting. */
interface Held {
  head: Promise<number>;
  done: Promise<string>;
}

function hold(port: number): Held {
  let onHead!: (s: number) => void;
  const head = new Promise<number>((r) => (onHead = r));
  const done = new Promise<string>((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/hold', headers: { host: L }, agent: false }, (res) => {
      onHead(res.statusCode ?? 0);
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve(body));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
  return { head, done };
}

describe('service group limits on HAProxy', () => {
  let h: [TestBackend, TestBackend];
  let t: [TestBackend, TestBackend];
  let dir: string;
  let plane: HaproxyDataPlane;
  let admin: RuntimeApi;
  const table = new BackendTable();
  const routes: Route[] = [];

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-limits-'));
    h = await backendPair('http', 'L');
    t = await backendPair('tcp', 'M');
    await table.set('gL', [h[0]]);
    await table.set('gM', [t[0]]);
    routes.push(
      { ...route('gL', 80, h[0].port, ['http'], [L]), limits: { soft: 1, hard: 3 } },
      { ...route('gM', 8443, t[0].port, ['tls'], [T]), limits: { soft: null, hard: 1 } },
    );
    plane = await testPlane(dir, table);
    for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
    admin = new RuntimeApi(path.join(dir, 'haproxy', 'admin.sock'));
  });
  after(async () => {
    await plane.close();
    for (const x of [...h, ...t]) await x.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** Requests waiting in the backend's queue, as HAProxy counts them. */
  const queued = async (): Promise<number> => {
    const be = plane.backendOf(80, 'gL')!;
    const csv = await admin.send('show stat');
    const cols = csv.split('\n')[0]!.replace(/^# /, '').split(',');
    const row = csv.split('\n').find((l) => l.startsWith(`${be},BACKEND,`));
    return Number(row!.split(',')[cols.indexOf('qcur')]);
  };

  test('HTTP: one request per instance in service, the next ones queue up to the hard limit, then 503', async () => {
    const port = plane.boundPort(80)!;
    const first = hold(port);
    assert.equal(await first.head, 200);
    const waiting = [hold(port), hold(port)];
    let seen = 0;
    await until(() => (void queued().then((n) => (seen = n)), seen === 2), 'two requests queued');
    // in service 1 + queued 2 = 3 = the hard limit for one instance: the next one is refused at once
    const refused = await request(port, L, '/');
    assert.equal(refused.status, 503);
    assert.equal(refused.headers['retry-after'], '1');
    assert.match(refused.body, /at its hard limit \(3 requests per instance\)/);
    // a queued request is served when the instance frees its slot, one at a time
    h[0].release();
    assert.equal(await first.done, 'La:held\ndone\n');
    const next = await Promise.race(waiting.map((w, i) => w.head.then(() => i)));
    assert.equal(await queued(), 1, 'the other one still waits');
    h[0].release();
    assert.equal(await waiting[1 - next]!.head, 200);
    h[0].release();
    for (const w of waiting) assert.equal(await w.done, 'La:held\ndone\n');
    // below the limits again: served
    assert.equal((await request(port, L, '/')).status, 200);
  });

  test('an instance added at run time gets the limit; the hard limit grows with the usable instances', async () => {
    const port = plane.boundPort(80)!;
    await table.set('gL', h); // Lb joins through `add server ... maxconn 1`
    for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
    const inService = [hold(port), hold(port)];
    assert.deepEqual(await Promise.all(inService.map((x) => x.head)), [200, 200]);
    assert.equal(h[0].open() > 0 && h[1].open() > 0, true, 'one request on each instance');
    const waiting = [0, 1, 2, 3].map(() => hold(port));
    let seen = 0;
    await until(() => (void queued().then((n) => (seen = n)), seen === 4), 'four requests queued');
    assert.equal((await request(port, L, '/')).status, 503, '2 instances x hard limit 3 = 6 in the backend');
    // releasing the held responses until every request is through: all were served
    const all = Promise.all([...inService, ...waiting].map((w) => w.done));
    let finished = false;
    const end = (): void => void (finished = true);
    void all.then(end, end);
    while (!finished) {
      h[0].release();
      h[1].release();
      await new Promise((r) => setTimeout(r, 20));
    }
    for (const body of await all) assert.match(body, /^L[ab]:held\ndone\n$/);
  });

  test('TCP: a connection beyond the hard limit is closed without reaching the instance', async () => {
    const port = plane.boundPort(8443)!;
    const a = await tlsConnect(port, T);
    assert.match(await readUntil(a, (s) => s.includes('\n')), /hello from Ma/);
    const b = await tlsConnect(port, T);
    const got = await readUntil(b, (s) => s.includes('\n'));
    assert.equal(got, '', 'the second connection is closed before any byte of the instance');
    assert.equal(t[0].open(), 1);
    a.destroy();
    b.destroy();
    await until(() => t[0].open() === 0, 'the first connection closed');
    const c = await tlsConnect(port, T);
    assert.match(await readUntil(c, (s) => s.includes('\n')), /hello from Ma/, 'room again after the first left');
    c.destroy();
  });
});
