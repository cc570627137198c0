import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
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
  testCa,
  tlsConnect,
  until,
  type TestBackend,
  testPlane,
} from '../testing.js';
import type { Route } from '../types.js';
import type { HaproxyDataPlane } from './plane.js';
import { freePort } from './process.js';
import { RuntimeApi } from './runtime.js';

const A = `app-aaaa1111.${METRO}`;
const R = `red-1.${METRO}`;
const T = `tcp-1.${METRO}`;

/** Worker processes of a HAProxy master (its children), from /proc. */
async function workerPids(master: number): Promise<number[]> {
  const { readdir, readFile } = await import('node:fs/promises');
  const out: number[] = [];
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    // the fields after the command (which may hold spaces) start with the state, then the parent
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === master) out.push(Number(pid));
  }
  return out;
}

describe('gateway on HAProxy', () => {
  let a: [TestBackend, TestBackend];
  let t: [TestBackend, TestBackend];
  let dir: string;
  let plane: HaproxyDataPlane;
  let routes: Route[];
  const table = new BackendTable();
  const woken: string[] = [];
  const idle: string[] = [];
  let wakeT = false;
  const apply = async (): Promise<void> => {
    for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
  };

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-test-'));
    a = await backendPair('http', 'A');
    t = await backendPair('tcp', 'T');
    await table.set('gA', a);
    await table.set('gT', t);
    await table.set('gR', []);
    routes = [
      route('gA', 80, a[0].port, ['http'], [A]),
      route('gA', 443, a[0].port, ['http', 'tls'], [A]),
      route('gR', 80, 443, ['http', 'redirect'], [R]),
      route('gT', 8443, t[0].port, ['tls'], [T]),
    ];
    plane = await testPlane(dir, table, {
      acmeChallenge: (host, token) => (token === 'tok' ? `${token}.key-of-${host}` : undefined),
      onIdle: (id) => idle.push(id),
      onNoBackend: async (g) => {
        woken.push(g);
        if (!wakeT || g !== 'gT') return false;
        await table.set('gT', t); // what a scale-to-zero wake does before resolving true
        return true;
      },
    });
    await apply();
  });
  after(async () => {
    await plane.close();
    for (const x of [...a, ...t]) await x.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('balances HTTP requests per request and sets X-Forwarded-*, replacing the client’s', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) seen.push(JSON.parse((await request(plane.boundPort(80)!, A, '/', { agent })).body).b);
    agent.destroy();
    assert.deepEqual(seen.sort(), ['Aa', 'Aa', 'Ab', 'Ab']);
    const j = JSON.parse(
      (await request(plane.boundPort(80)!, A, '/p?q=1', { headers: { 'x-forwarded-for': '6.6.6.6' } })).body,
    );
    assert.equal(j.url, '/p?q=1');
    assert.equal(j.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal(j.headers['x-forwarded-proto'], 'http');
    assert.equal(j.headers['x-forwarded-host'], A);
  });

  test('unknown names get the activator’s 404 text; oversized heads get 431', async () => {
    const r = await request(plane.boundPort(80)!, 'nobody-zzzz.unihost.test', '/x');
    assert.equal(r.status, 404);
    assert.match(r.body, /no service is published at nobody-zzzz\.unihost\.test on port 80/);
    const big = await request(plane.boundPort(80)!, A, '/', { headers: { 'x-big': 'y'.repeat(20_000) } });
    assert.equal(big.status, 431);
  });

  test('redirect answers 301 (308 for POST); ACME HTTP-01 is answered before it', async () => {
    const port = plane.boundPort(80)!;
    const g = await request(port, R, '/a?b=1');
    assert.equal(g.status, 301);
    assert.equal(g.headers.location, `https://${R}/a?b=1`);
    assert.equal((await request(port, R, '/', { method: 'POST', body: 'x' })).status, 308);
    const acme = await request(port, R, '/.well-known/acme-challenge/tok');
    assert.equal(acme.status, 200);
    assert.equal(acme.body, `tok.key-of-${R}\n`);
    assert.equal((await request(port, R, '/.well-known/acme-challenge/other')).status, 301);
  });

  test('TLS: routes by SNI with the wildcard certificate, HTTP/2 by ALPN, Host must agree (421)', async () => {
    const port = plane.boundPort(443)!;
    const r = await request(port, A, '/s', { tls: true });
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.body).headers['x-forwarded-proto'], 'https');
    const mis = await request(port, A, '/', { tls: true, headers: { host: `other.${METRO}` } });
    assert.equal(mis.status, 421);
    const ca = (await testCa()).caCert;
    const s = http2.connect(`https://${A}:${port}`, { ca, host: '127.0.0.1', servername: A } as never);
    const status = await new Promise<number>((resolve, reject) => {
      const q = s.request({ ':path': '/h2' });
      q.on('response', (h) => resolve(Number(h[':status'])));
      q.on('error', reject);
      q.resume();
    });
    s.close();
    assert.equal(status, 200);
    await assert.rejects(tlsConnect(port, `nobody.${METRO}`), /unrecognized name/);
  });

  test('TCP with TLS: one connection is piped to one instance', async () => {
    const s = await tlsConnect(plane.boundPort(8443)!, T);
    const text = await readUntil(s, (x) => x.includes('hello from'));
    assert.match(text, /hello from T[ab]/);
    s.destroy();
  });

  test('TCP group without an instance: the activator holds the connection, asks onNoBackend, then closes or pipes', async () => {
    await table.set('gT', []);
    await apply();
    const s1 = await tlsConnect(plane.boundPort(8443)!, T);
    assert.equal(await readUntil(s1, () => false), '', 'closed without data');
    assert.ok(woken.includes('gT'));
    wakeT = true;
    const s2 = await tlsConnect(plane.boundPort(8443)!, T);
    const hello = await readUntil(s2, (x) => x.includes('hello from'));
    assert.match(hello, /hello from T[ab]/);
    // HAProxy does not see the piped connection: the plane counts it open itself (scale-to-zero must not
    // take the woken instance away under it), and its end makes the instance idle
    const piped = t.find((b) => hello.includes(`hello from ${b.id}`)) ?? t[0];
    const open = () => plane.counters().instances[piped.id]?.openConnections ?? 0;
    // exactly one (HAProxy's stats, read every 50 ms, may still show the first connection for a moment)
    await until(() => open() === 1, 'the piped connection counts as open, once');
    const idleBefore = idle.length;
    s2.destroy();
    await until(() => open() === 0, 'the piped connection is no longer counted');
    assert.ok(idle.slice(idleBefore).includes(piped.id), 'its end is the instance going idle');
    wakeT = false;
    await apply();
  });

  test('instances come and go through the Runtime API without a reload; none running: activator 503', async () => {
    const port = plane.boundPort(80)!;
    const before = await plane.workerPid();
    await table.set('gA', [a[1]]);
    await apply();
    for (let i = 0; i < 3; i++) assert.equal(JSON.parse((await request(port, A)).body).b, 'Ab');
    await table.set('gA', []);
    await apply();
    const r = await request(port, A);
    assert.equal(r.status, 503);
    assert.match(r.body, /no instance of it is running/);
    assert.ok(woken.includes('gA'), 'onNoBackend was asked');
    await table.set('gA', a);
    await apply();
    assert.equal((await request(port, A)).status, 200);
    assert.equal(await plane.workerPid(), before, 'no reload happened');
  });

  test('an instance about to stop leaves at once (leave): no new requests reach it; a sync takes it back while it runs', async () => {
    const port = plane.boundPort(80)!;
    await apply();
    await plane.leave(a[0].id);
    // no route sync in between: HAProxy sends nothing more to Aa
    for (let i = 0; i < 4; i++) assert.equal(JSON.parse((await request(port, A)).body).b, 'Ab');
    await plane.leave(a[1].id);
    const r = await request(port, A);
    assert.equal(r.status, 503, 'both out: the activator answers');
    // the store still says both run (a stop that did not happen): the next sync enables them again
    await apply();
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) seen.add(JSON.parse((await request(port, A)).body).b);
    assert.deepEqual([...seen].sort(), ['Aa', 'Ab']);
  });

  test('a group whose instances all drain reaches the activator by its backend’s backup server: 503 with Retry-After; its bytes count for the group, not as a routed request', async () => {
    const port = plane.boundPort(80)!;
    const settled = async () => {
      // the counters of earlier requests arrive with the next stats polls (every 50 ms here)
      await new Promise((res) => setTimeout(res, 300));
      const g = plane.counters().groups.gA;
      return { requests: g?.requests ?? 0, bytesOut: g?.bytesOut ?? 0 };
    };
    const c0 = await settled();
    await table.set('gA', a, 'draining');
    await apply();
    try {
      const w0 = woken.length;
      const r = await request(port, A, '/d');
      assert.equal(r.status, 503);
      assert.equal(r.headers['retry-after'], '5');
      assert.match(r.body, /no instance of it is running/);
      assert.deepEqual(woken.slice(w0), ['gA'], 'asked to wake the group once');
      const c1 = await settled();
      assert.equal(c1.requests, c0.requests, 'the platform’s own answer is not a request routed to the group');
      assert.ok(c1.bytesOut > c0.bytesOut, 'its bytes count for the group');
    } finally {
      await table.set('gA', a);
      await apply();
    }
    assert.equal((await request(port, A)).status, 200);
  });

  test('groups come and go on a port without a reload (spare backends); a freed backend is reused last; a full pool grows once', async () => {
    const port = plane.boundPort(80)!;
    const n = await backendPair('http', 'N');
    const name = (i: number) => `new-${i}.${METRO}`;
    const group = (i: number) => route(`gN${i}`, 80, n[0].port, ['http'], [name(i)]);
    const base = routes;
    try {
      for (let i = 0; i < 12; i++) await table.set(`gN${i}`, n);
      const pid = await plane.workerPid();
      routes = [...base, group(0)];
      await apply();
      assert.match(JSON.parse((await request(port, name(0))).body).b, /^N[ab]$/, 'routed at once');
      const first = plane.backendOf(80, 'gN0');
      assert.notEqual(first, plane.backendOf(80, 'gA'));
      routes = [...base];
      await apply();
      assert.equal((await request(port, name(0))).status, 404, 'its name is gone');
      routes = [...base, group(1)];
      await apply();
      assert.notEqual(plane.backendOf(80, 'gN1'), first, 'a never-used spare before the freed one');
      assert.match(JSON.parse((await request(port, name(1))).body).b, /^N[ab]$/);
      assert.equal(await plane.workerPid(), pid, 'no reload happened');
      // gA and 11 new groups: more than the 8 HTTP backends rendered for port 80
      routes = [...base, ...Array.from({ length: 11 }, (_, i) => group(i + 1))];
      await apply();
      const grown = await plane.workerPid();
      assert.notEqual(grown, pid, 'the pool grew with one reload');
      for (let i = 1; i < 12; i++) assert.equal((await request(port, name(i))).status, 200, name(i));
      assert.equal(new Set(routes.map((r) => plane.backendOf(r.port, r.groupId))).size, routes.length);
      routes = [...base];
      await apply();
      assert.equal(await plane.workerPid(), grown, 'groups leaving cost no reload');
      assert.equal(JSON.parse((await request(port, A)).body).b.startsWith('A'), true);
    } finally {
      routes = base;
      await apply();
      for (const x of n) await x.close();
    }
  });

  test('drain: no new requests go to a draining server; it ends once HAProxy counts no session', async () => {
    const port = plane.boundPort(80)!;
    // a request held open on Aa
    let held: http.ClientRequest | undefined;
    for (let i = 0; i < 4 && !held; i++) {
      const req = http.get({ host: '127.0.0.1', port, path: '/hold', headers: { host: A } });
      const first = await new Promise<string>((resolve) =>
        req.on('response', (res) => res.once('data', (d) => resolve(String(d)))),
      );
      if (first.startsWith('Aa')) held = req;
      else {
        a[1].release();
        req.destroy();
      }
    }
    assert.ok(held, 'a request is held on Aa');
    await plane.refresh();
    assert.equal(plane.connections('Aa'), 1);
    const drained = plane.drain('Aa', 10_000);
    await table.setState('Aa', 'draining');
    for (let i = 0; i < 3; i++) assert.equal(JSON.parse((await request(port, A)).body).b, 'Ab');
    a[0].release();
    assert.equal(await drained, 'idle');
    await table.setState('Aa', 'running');
    await apply();
    held!.destroy();
  });

  test('an idle instance set draining by the route sync reports onIdle, and counts as busy until a fresh poll', async () => {
    idle.length = 0;
    await table.setState('Ab', 'draining');
    await apply();
    assert.equal(plane.connections('Ab'), 1, 'busy until a poll after the drain began');
    await until(() => idle.includes('Ab'), 'onIdle(Ab)');
    assert.equal(plane.connections('Ab'), 0);
    for (let i = 0; i < 3; i++) assert.equal(JSON.parse((await request(plane.boundPort(80)!, A)).body).b, 'Aa');
    await table.setState('Ab', 'running');
    await apply();
  });

  test('a refused runtime command (HAProxy changed behind our back) ends in a full re-sync with a reload', async () => {
    const admin = new RuntimeApi(path.join(dir, 'haproxy', 'admin.sock'));
    const be = plane.backendOf(80, 'gA')!;
    for (const c of [`set server ${be}/Ab state maint`, `del server ${be}/Ab`]) await admin.send(c);
    const pid = await plane.workerPid();
    await table.setState('Ab', 'draining'); // `set server <be>/Ab state drain` is refused: no such server
    await apply();
    assert.notEqual(await plane.workerPid(), pid, 'reloaded');
    await table.setState('Ab', 'running');
    await apply();
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) seen.add(JSON.parse((await request(plane.boundPort(80)!, A)).body).b);
    assert.deepEqual([...seen].sort(), ['Aa', 'Ab'], 'both servers back');
  });

  test('counters per group and instance come from HAProxy’s stats', async () => {
    const c0 = plane.counters();
    await request(plane.boundPort(80)!, A);
    await request(plane.boundPort(80)!, A);
    await until(() => (plane.counters().groups.gA?.requests ?? 0) >= (c0.groups.gA?.requests ?? 0) + 2, 'counters');
    const c = plane.counters();
    assert.ok(c.groups.gA!.bytesIn > 0 && c.groups.gA!.bytesOut > 0);
    assert.ok(c.groups.gA!.lastActivity > 0);
    assert.equal(c.instances.Aa!.groupId, 'gA');
    assert.ok(c.instances.Aa!.requests + c.instances.Ab!.requests >= 2);
  });

  test('workers run as an unprivileged user in an empty chroot; the master alone is root', async () => {
    const { readFile, readlink, readdir } = await import('node:fs/promises');
    const uid = async (pid: number) => Number(/^Uid:\s+(\d+)/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'))![1]);
    const master = plane.pid();
    assert.equal(await uid(master), 0);
    const ws = await workerPids(master);
    assert.ok(ws.length >= 1, 'a worker runs');
    const jail = path.join(dir, 'haproxy', 'jail');
    for (const w of ws) {
      assert.notEqual(await uid(w), 0, `worker ${w} is not root`);
      assert.equal(await readlink(`/proc/${w}/root`), jail, `worker ${w} is chrooted`);
    }
    // nothing in the jail but the sockets of the TLS hand-over (none on these ports: no ACME names)
    for (const e of await readdir(jail)) assert.match(e, /^tls-\d+\.sock$/);
    // and it still serves, TLS included
    assert.equal((await request(plane.boundPort(80)!, A)).status, 200);
  });

  test('a killed HAProxy is restarted and re-synced', async () => {
    const pid = plane.pid();
    process.kill(pid, 'SIGKILL');
    await until(() => plane.pid() !== pid, 'a new master', 10_000);
    let ok = false;
    for (let i = 0; i < 200 && !ok; i++) {
      ok = await request(plane.boundPort(80)!, A).then(
        (r) => r.status === 200,
        () => false,
      );
      if (!ok) await new Promise((r) => setTimeout(r, 25));
    }
    assert.ok(ok, 'serving again');
  });

  // last: it closes the activator
  test('names not published, and ACME paths past a rate, are answered by HAProxy itself: the activator is not on their way', async () => {
    await (plane as unknown as { activator: { close(): Promise<void> } }).activator.close();
    const r = await request(plane.boundPort(80)!, 'nobody-yyyy.unihost.test', '/x');
    assert.equal(r.status, 404);
    assert.match(r.body, /^unihost: no service is published at nobody-yyyy\.unihost\.test on port 80\.$/);
    // ACME HTTP-01 paths too: only names published on the port reach the activator
    const acme = await request(plane.boundPort(80)!, 'nobody-yyyy.unihost.test', '/.well-known/acme-challenge/tok');
    assert.equal(acme.status, 404);
    // and those at a bounded rate per client: HAProxy answers 429 past it
    const statuses: number[] = [];
    for (let i = 0; i < 45; i++)
      statuses.push((await request(plane.boundPort(80)!, R, `/.well-known/acme-challenge/t${i}`)).status);
    assert.ok(statuses.filter((x) => x === 429).length >= 10, statuses.join(' '));
    assert.equal(statuses.at(-1), 429);
  });
});

describe('gateway on HAProxy: daemon restart', () => {
  test('a new data plane adopts the running HAProxy instead of starting another', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-adopt-'));
    const a = await backendPair('http', 'D');
    const table = new BackendTable();
    await table.set('gD', a);
    const routes = [route('gD', 80, a[0].port, ['http'], [A])];
    const fixed = () => first.boundPort(80) ?? 0;
    const first = await testPlane(dir, table);
    let second: HaproxyDataPlane | undefined;
    try {
      await first.setRoutes(routes);
      const port = fixed();
      const pid = first.pid();
      await first.close({ keep: true });
      second = await testPlane(dir, table, { portMap: () => port });
      await second.setRoutes(routes);
      assert.equal(second.pid(), pid, 'same master');
      assert.equal((await request(port, A)).status, 200);
    } finally {
      await (second ?? first).close();
      for (const x of a) await x.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('gateway on HAProxy: free ports', () => {
  const table = new BackendTable();
  const dirs: string[] = [];
  const squatter = net.createServer();
  let a: [TestBackend, TestBackend];
  let taken = 0;
  // the race, made certain: while `squat` is set, the next "free" port is one another process holds
  let squat = false;
  const picks: number[] = [];
  const pickPort = async (host: string): Promise<number> => {
    const p = squat ? taken : await freePort(host);
    squat = false;
    picks.push(p);
    return p;
  };
  const startPlane = async (): Promise<HaproxyDataPlane> => {
    const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-race-'));
    dirs.push(dir);
    return testPlane(dir, table, { pickPort });
  };
  const first = () => [route('gF', 80, a[0].port, ['http'], [A])];

  before(async () => {
    a = await backendPair('http', 'F');
    await table.set('gF', a);
    await new Promise<void>((r) => squatter.listen(0, '127.0.0.1', r));
    taken = (squatter.address() as net.AddressInfo).port;
  });
  after(async () => {
    squatter.close();
    for (const x of a) await x.close();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  test('a free port taken by another process before HAProxy binds it is picked again', async () => {
    squat = true;
    picks.length = 0;
    const plane = await startPlane();
    try {
      const [r] = await plane.setRoutes(first());
      assert.equal(r?.error, undefined);
      assert.equal(picks[0], taken);
      assert.notEqual(r?.boundPort, taken);
      assert.equal(r?.boundPort, picks.at(-1));
      assert.equal((await request(r!.boundPort!, A)).status, 200);
    } finally {
      await plane.close();
    }
  });

  test('the same race on a port added to a running HAProxy (a reload) is picked again too', async () => {
    const plane = await startPlane();
    try {
      const [r80] = await plane.setRoutes(first());
      assert.equal(r80?.error, undefined);
      const pid = plane.pid();
      squat = true; // the reload that adds port 8080 fails to bind the first pick
      const t0 = Date.now();
      const res = await plane.setRoutes([...first(), route('gF', 8080, a[0].port, ['http'], [A])]);
      const r8080 = res.find((r) => r.port === 8080);
      assert.equal(r8080?.error, undefined, `8080: ${r8080?.error}`);
      assert.notEqual(r8080?.boundPort, taken);
      assert.ok(
        Date.now() - t0 < 9000,
        `picked again without waiting out the 10 s reload timeout (${Date.now() - t0} ms)`,
      );
      assert.equal(plane.pid(), pid, 'the same master');
      assert.equal((await request(r8080!.boundPort!, A)).status, 200);
      assert.equal((await request(r80!.boundPort!, A)).status, 200);
    } finally {
      await plane.close();
    }
  });

  test('a port HAProxy cannot bind (another process holds it) leaves the other ports working, now and after', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-blocked-'));
    dirs.push(dir);
    // public 8081 is mapped to the squatter's port: it can never be bound
    const plane = await testPlane(dir, table, { portMap: (p) => (p === 8081 ? taken : 0) });
    try {
      const [r80] = await plane.setRoutes(first());
      assert.equal(r80?.error, undefined);
      const pid = plane.pid();
      const res = await plane.setRoutes([
        ...first(),
        route('gF', 8081, a[0].port, ['http'], [A]),
        route('gF', 8082, a[0].port, ['http'], [A]),
      ]);
      const by = new Map(res.map((r) => [r.port, r]));
      assert.match(by.get(8081)?.error ?? '', new RegExp(`cannot listen on 127\\.0\\.0\\.1:${taken}`));
      assert.equal(by.get(80)?.error, undefined);
      assert.equal(by.get(8082)?.error, undefined, `8082: ${by.get(8082)?.error}`);
      assert.equal((await request(by.get(8082)!.boundPort!, A)).status, 200, 'the port added beside it works');
      assert.equal((await request(r80!.boundPort!, A)).status, 200);
      assert.equal(plane.pid(), pid, 'the same master');
      // a later change for another port is not blocked by the bad one either
      const more = await plane.setRoutes([
        ...first(),
        route('gF', 8081, a[0].port, ['http'], [A]),
        route('gF', 8082, a[0].port, ['http'], [A]),
        route('gF', 8083, a[0].port, ['http'], [A]),
      ]);
      const r8083 = more.find((r) => r.port === 8083)!;
      assert.equal(r8083.error, undefined);
      assert.equal((await request(r8083.boundPort!, A)).status, 200);
      assert.match(more.find((r) => r.port === 8081)?.error ?? '', /cannot listen/);
    } finally {
      await plane.close();
    }
  });
});

describe('gateway on HAProxy: reloads are bounded', () => {
  const workers = async (master: number): Promise<number> => (await workerPids(master)).length;

  test('old workers holding connections are ended after mworker-max-reloads further reloads', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-reloads-'));
    const t = await backendPair('tcp', 'W');
    const table = new BackendTable();
    await table.set('gW', t);
    const plane = await testPlane(dir, table, { limits: { maxReloads: 2 }, minReloadGapMs: 0 });
    const held: import('node:tls').TLSSocket[] = [];
    try {
      const routes = [route('gW', 8443, t[0].port, ['tls'], [T])];
      await plane.setRoutes(routes);
      const master = plane.pid()!;
      let most = 0;
      for (let i = 0; i < 6; i++) {
        // a long-lived connection on the current worker, then a reload (a new port)
        const s = await tlsConnect(plane.boundPort(8443)!, T);
        await readUntil(s, (x) => x.includes('hello from'));
        held.push(s);
        routes.push(route('gW', 9000 + i, t[0].port, ['tls'], [T]));
        for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
        await new Promise((r) => setTimeout(r, 300));
        most = Math.max(most, await workers(master));
      }
      // the current worker plus at most maxReloads old ones (each holding a connection)
      assert.ok(most <= 3, `${most} workers at most (6 reloads, each leaving a busy worker behind)`);
      assert.ok(most >= 2, `old workers do keep their connections for a while (${most})`);
      assert.equal(plane.reloads, 6);
    } finally {
      for (const s of held) s.destroy();
      await plane.close();
      for (const x of t) await x.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('a kept-alive HTTP connection idle across a reload is not cut: its next request is answered, with Connection: close', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-idle-'));
    const a = await backendPair('http', 'K');
    const table = new BackendTable();
    await table.set('gK', a);
    const plane = await testPlane(dir, table, { minReloadGapMs: 0 });
    const name = `keep-1.${METRO}`;
    const s = new net.Socket();
    try {
      const routes = [route('gK', 80, a[0].port, ['http'], [name])];
      await plane.setRoutes(routes);
      s.connect(plane.boundPort(80)!, '127.0.0.1');
      await new Promise((r) => s.once('connect', r));
      let ended = false;
      s.once('end', () => (ended = true));
      const ask = () => s.write(`GET / HTTP/1.1\r\nHost: ${name}\r\n\r\n`);
      // a whole answer (the backend's body is chunked)
      const answer = (text: string) => /x-backend: K[\s\S]*\r\n0\r\n\r\n$/.test(text);
      ask();
      assert.match(await readUntil(s, answer), /^HTTP\/1\.1 200/);
      const pid = await plane.workerPid();
      // a reload (a new port) while the connection is idle: the old worker is soft-stopped
      routes.push(route('gK', 8080, a[0].port, ['http'], [name]));
      for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
      assert.notEqual(await plane.workerPid(), pid, 'reloaded');
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(ended, false, 'the old worker did not close the idle connection under the client');
      ask();
      const second = await readUntil(s, answer);
      assert.match(second, /^HTTP\/1\.1 200/, second);
      assert.match(second, /\r\nconnection: close\r\n/i, 'told not to reuse it');
    } finally {
      s.destroy();
      await plane.close();
      for (const x of a) await x.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('a burst of route tables is applied as the newest one: one or two reloads, not one each', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-burst-'));
    const t = await backendPair('tcp', 'X');
    const table = new BackendTable();
    await table.set('gX', t);
    const plane = await testPlane(dir, table);
    try {
      const base = [route('gX', 8443, t[0].port, ['tls'], [T])];
      await plane.setRoutes(base);
      const before = plane.reloads;
      const tables = Array.from({ length: 8 }, (_, i) => [
        ...base,
        ...Array.from({ length: i + 1 }, (_, k) => route('gX', 9100 + k, t[0].port, ['tls'], [T])),
      ]);
      const all = await Promise.all(tables.map((r) => plane.setRoutes(r)));
      assert.ok(plane.reloads - before <= 2, `${plane.reloads - before} reloads for 8 tables`);
      const last = all.at(-1)!;
      assert.equal(last.length, 9);
      for (const r of last) assert.equal(r.error, undefined);
      const s = await tlsConnect(plane.boundPort(9107)!, T);
      assert.match(await readUntil(s, (x) => x.includes('hello from')), /hello from X[ab]/);
      s.destroy();
    } finally {
      await plane.close();
      for (const x of t) await x.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('gateway on HAProxy: the first request of a wake, sent on by the activator', () => {
  test('a woken instance that sends no response headers in time: 504, and the forward is no longer held open', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'uh-hp-wake-'));
    const W = `wake-1.${METRO}`;
    // an instance that accepts and reads, and never answers
    const open = new Set<net.Socket>();
    const silent = net.createServer((c) => {
      open.add(c);
      c.on('close', () => open.delete(c));
      c.resume();
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const port = (silent.address() as net.AddressInfo).port;
    const table = new BackendTable();
    await table.set('gW', []);
    const plane = await testPlane(dir, table, {
      limits: { upstreamHeadersTimeoutMs: 300 },
      onNoBackend: async () => {
        // what a wake does before resolving true
        table.groups.set('gW', [{ instanceId: 'silent', host: '127.0.0.1', state: 'running' }]);
        return true;
      },
    });
    try {
      for (const r of await plane.setRoutes([route('gW', 80, port, ['http'], [W])])) assert.equal(r.error, undefined);
      const r = await request(plane.boundPort(80)!, W, '/');
      assert.equal(r.status, 504, "HAProxy's `timeout server` (upstreamHeadersTimeoutMs) ends the wait");
      // the forward is counted open while it lasts (scale-to-zero reads it as traffic): no longer
      await until(() => plane.connections('silent') === 0, 'the forward is no longer counted open');
      await until(() => open.size === 0, 'the connection to the instance is closed');
    } finally {
      await plane.close();
      silent.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('between whole reads, a poll reads the frontends and the backends with servers only; counters still move', async () => {
    const pdir = await mkdtemp(path.join(tmpdir(), 'uh-hp-live-'));
    const table = new BackendTable();
    const pair = await backendPair('http', 'L');
    const [b, b2] = pair;
    const L = `live-1.${METRO}`;
    const I = `idle-1.${METRO}`;
    await table.set('gLive', [b]);
    await table.set('gIdle', []); // its instances are stopped: no server
    const plane = await testPlane(pdir, table, { statsIntervalMs: 20 });
    const admin = (plane as unknown as { proc: { admin: RuntimeApi } }).proc.admin;
    const sent: string[] = [];
    const send = admin.send.bind(admin);
    admin.send = (c: string, payload?: string) => {
      if (c.startsWith('show stat')) sent.push(c);
      return send(c, payload);
    };
    const routes = [route('gLive', 80, b.port, ['http'], [L]), route('gIdle', 80, b.port, ['http'], [I])];
    try {
      for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
      const live = plane.backendOf(80, 'gLive')!;
      const idle = plane.backendOf(80, 'gIdle')!;
      await new Promise((r) => setTimeout(r, 200));
      sent.length = 0;
      await new Promise((r) => setTimeout(r, 600));
      const whole = sent.filter((c) => c === 'show stat');
      const partial = sent.filter((c) => c !== 'show stat');
      assert.ok(whole.length <= 1, `whole reads in 0.6 s: ${whole.length} (one every 5 s)`);
      assert.ok(partial.length >= 10, `partial reads in 0.6 s: ${partial.length}`);
      for (const c of partial) {
        assert.ok(c.split(';').includes(`show stat ${live} -1 -1`), `the live backend is read: ${c}`);
        assert.ok(!c.includes(idle), `the backend with no server is not: ${c}`);
        assert.ok(c.startsWith('show stat -1 1 -1;'), `every frontend is: ${c}`);
      }
      // what the partial reads carry: an instance's requests and sessions, as a whole read would
      const before = plane.counters().instances[b.id]?.requests ?? 0;
      assert.equal((await request(plane.boundPort(80)!, L, '/')).status, 200);
      await until(() => (plane.counters().instances[b.id]?.requests ?? 0) === before + 1, 'the request counted');
      await until(() => (plane.counters().groups.gLive?.requests ?? 0) >= 1, "the group's requests");
      assert.equal(plane.counters().instances[b.id]?.openConnections, 0);
      // a group whose instance starts is read from the next poll on
      await table.set('gIdle', [b2]);
      for (const r of await plane.setRoutes(routes)) assert.equal(r.error, undefined);
      await until(
        () => sent.some((c) => c !== 'show stat' && c.includes(idle)),
        "the started instance's backend is read",
      );
      assert.equal((await request(plane.boundPort(80)!, I, '/')).status, 200);
      await until(() => (plane.counters().instances[b2.id]?.requests ?? 0) === 1, "its instance's request counted");
    } finally {
      await plane.close();
      for (const x of pair) await x.close();
      await rm(pdir, { recursive: true, force: true });
    }
  });

  test("the stats are polled at full rate only while a user's group is routed; the platform's own routes alone, rarely", async () => {
    const pdir = await mkdtemp(path.join(tmpdir(), 'uh-hp-poll-'));
    const table = new BackendTable();
    const pair = await backendPair('http', 'P');
    const b = pair[0];
    await table.set('platform-registry', [b]);
    await table.set('gU', [b]);
    const plane = await testPlane(pdir, table, { statsIntervalMs: 20 });
    const admin = (plane as unknown as { proc: { admin: RuntimeApi } }).proc.admin;
    let reads = 0;
    const send = admin.send.bind(admin);
    admin.send = (c: string, payload?: string) => {
      if (c.startsWith('show stat')) reads++;
      return send(c, payload);
    };
    const readsOver = async (ms: number): Promise<number> => {
      const r0 = reads;
      await new Promise((r) => setTimeout(r, ms));
      return reads - r0;
    };
    try {
      const own = route('platform-registry', 443, b.port, ['http', 'tls'], [`registry.${METRO}`], '');
      for (const r of await plane.setRoutes([own])) assert.equal(r.error, undefined);
      await readsOver(100); // the first poll after the change may read
      const alone = await readsOver(1000);
      assert.ok(alone <= 3, `the platform's routes alone: ${alone} reads in 1 s (a read every 20th tick of 20 ms)`);
      const r0 = reads;
      await plane.refresh();
      assert.equal(reads, r0 + 1, 'an asked-for read happens at once whatever the rate');
      for (const r of await plane.setRoutes([own, route('gU', 80, b.port, ['http'], [A])]))
        assert.equal(r.error, undefined);
      const routed = await readsOver(1000);
      assert.ok(routed >= 15, `a user's group routed: ${routed} reads in 1 s (every tick of 20 ms)`);
    } finally {
      await plane.close();
      for (const x of pair) await x.close();
      await rm(pdir, { recursive: true, force: true });
    }
  });
});
