/**
 * The DataPlane contract (types.ts), run against both implementations:
 * HaproxyDataPlane (real HAProxy on free loopback ports, real HTTP to two
 * test backends) and MemoryDataPlane (its `request`). The in-memory plane
 * that unit tests use must route as HAProxy does: by port and name, across
 * the running instances, 404 for an unknown name, the redirect, the wake of
 * a group with no running instance, else 503, and the same counters.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { MemoryDataPlane } from './memory.js';
import {
  BackendTable,
  backendPair,
  METRO,
  request,
  route,
  silent,
  testCa,
  testPlane,
  until,
  type TestBackend,
} from './testing.js';
import type { DataPlane, Route } from './types.js';

const A = `app-a.${METRO}`;
const Z = `zero-z.${METRO}`;
const R = `red-r.${METRO}`;

interface Subject {
  plane: DataPlane;
  /** one GET / for `host` on public `port`: the status and, when an instance answered, its id */
  send(host: string, port: number): Promise<{ status: number; instanceId?: string }>;
  close(): Promise<void>;
}

type Make = (table: BackendTable, onNoBackend: (groupId: string) => Promise<boolean>) => Promise<Subject>;

function contract(name: string, make: Make): void {
  describe(`DataPlane contract: ${name}`, () => {
    const table = new BackendTable();
    let a: [TestBackend, TestBackend];
    let z: [TestBackend, TestBackend];
    let s: Subject;
    const woken: string[] = [];
    const routes: Route[] = [
      route('gA', 80, 0, ['http'], [A]),
      route('gZ', 80, 0, ['http'], [Z]),
      route('gR', 80, 443, ['http', 'redirect'], [R]),
    ];

    before(async () => {
      a = await backendPair('http', 'A');
      z = await backendPair('http', 'Z');
      for (const r of routes) r.destinationPort = r.groupId === 'gA' ? a[0].port : r.groupId === 'gZ' ? z[0].port : 443;
      await table.set('gA', a);
      await table.set('gZ', [z[0]], 'other');
      s = await make(table, async (groupId) => {
        woken.push(groupId);
        // scale to zero: the master of gZ starts once; other groups have nothing to wake
        if (groupId !== 'gZ') return false;
        await table.set('gZ', [z[0]]);
        return true;
      });
      const res = await s.plane.setRoutes(routes);
      assert.deepEqual(
        res.map((r) => [r.port, r.error]),
        [[80, undefined]],
      );
    });
    after(async () => {
      await s?.close();
      for (const b of [...(a ?? []), ...(z ?? [])]) await b.close();
    });

    test('requests go by name to the running instances of the group, round robin, and are counted', async () => {
      const seen = new Set<string | undefined>();
      for (let i = 0; i < 4; i++) {
        const r = await s.send(A, 80);
        assert.equal(r.status, 200);
        seen.add(r.instanceId);
      }
      assert.deepEqual([...seen].sort(), ['Aa', 'Ab']);
      await until(() => (s.plane.counters().groups.gA?.requests ?? 0) >= 4, 'the group counter');
      const inst = s.plane.counters().instances;
      assert.equal((inst.Aa?.requests ?? 0) + (inst.Ab?.requests ?? 0), 4);
      assert.equal(inst.Aa?.groupId, 'gA');
    });

    test('names match without regard to case or a trailing dot', async () => {
      assert.equal((await s.send(A.toUpperCase(), 80)).status, 200);
      const dotted = routes.map((r) => (r.groupId === 'gA' ? { ...r, fqdns: [`${A.toUpperCase()}.`] } : r));
      await s.plane.setRoutes(dotted);
      assert.equal((await s.send(A, 80)).status, 200);
      await s.plane.setRoutes(routes);
    });

    test('an unknown name gets 404, a redirect route 301', async () => {
      assert.equal((await s.send(`nobody.${METRO}`, 80)).status, 404);
      assert.equal((await s.send(R, 80)).status, 301);
      assert.deepEqual(woken, [], 'neither asked for a wake');
    });

    test('a group with no running instance is woken and served; without a wake it gets 503', async () => {
      const r = await s.send(Z, 80);
      assert.deepEqual(r, { status: 200, instanceId: 'Za' });
      assert.deepEqual(woken, ['gZ']);
      await table.set('gA', a, 'other');
      await s.plane.setRoutes(routes);
      assert.equal((await s.send(A, 80)).status, 503);
      assert.deepEqual(woken, ['gZ', 'gA']);
    });
  });
}

contract('HaproxyDataPlane', async (table, onNoBackend) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'uh-plane-contract-'));
  const plane = await testPlane(dir, table, { onNoBackend });
  return {
    plane,
    async send(host, port) {
      const r = await request(plane.boundPort(port)!, host);
      return r.status === 200 ? { status: 200, instanceId: JSON.parse(r.body).b as string } : { status: r.status };
    },
    async close() {
      await plane.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

contract('MemoryDataPlane', async (table, onNoBackend) => {
  const ca = await testCa();
  const plane = new MemoryDataPlane({
    listenHost: '127.0.0.1',
    tls: { cert: ca.cert, key: ca.key },
    metroDomain: METRO,
    backends: table.get,
    onNoBackend,
    log: silent,
  });
  return { plane, send: (host, port) => plane.request(host, port), close: () => plane.close() };
});
