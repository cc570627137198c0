/**
 * `GET /metrics` as Prometheus scrapes it: the HTTP body is parsed by a
 * Prometheus text-format parser, not read back from prom-client. Also the
 * request ids: a client's `X-Request-Id` comes back and names the request
 * in the structured logs.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable, Writable } from 'node:stream';
import pino from 'pino';
import { getMetricsFromStream, type PromMetric, type PromMetrics } from 'prom2javascript';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

let h: Harness;
let op: string; // a developer (operator) account
let user: string;
const logLines: Record<string, unknown>[] = [];

const { ok } = replyAsserts('instances');

before(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) logLines.push(JSON.parse(line));
      cb();
    },
  });
  h = await startHarness({}, (s) => [simMachines(s)], { logger: pino({ level: 'debug' }, sink) });
  op = await h.user('op', true);
  user = await h.user('user');
  await h.image('app:latest');
});
after(async () => h.close());

/** Scrapes like Prometheus and parses the HTTP body with a text-format parser (it rejects malformed lines). */
async function scrape(): Promise<PromMetrics> {
  const r = await h.call('GET', '/metrics', op);
  assert.equal(r.status, 200, r.text);
  // The format allows NaN samples (the event loop lag's mean before its first sample), which this parser does
  // not know: they must be spelled as the format says, and are left out of what it parses.
  const lines = r.text.split('\n');
  for (const l of lines.filter((x) => /\snan$/i.test(x))) assert.match(l, /^\w+(\{.*\})? NaN$/);
  return getMetricsFromStream(Readable.from([lines.filter((x) => !/ NaN$/.test(x)).join('\n')]));
}

const family = (fs: PromMetrics, name: string): PromMetric => {
  const f = fs[name];
  assert.ok(f, `metric ${name} in ${Object.keys(fs).join(', ')}`);
  return f;
};
type Sample = {
  labels: Record<string, string>;
  value?: number;
  buckets?: Record<string, number>;
  count?: number;
  sum?: number;
};
const withLabels = (f: PromMetric, labels: Record<string, string>): Sample | undefined =>
  (f.data as Sample[]).find((m) => Object.entries(labels).every(([k, v]) => m.labels[k] === v));

describe('GET /metrics', () => {
  test('instances by state, boot times, API latency by route and status', async () => {
    for (const name of ['p1', 'p2']) {
      ok(await h.call('POST', '/v1/instances', user, { image: 'app:latest', name, autostart: true, timeout_s: 5 }));
    }
    ok(await h.call('POST', '/v1/instances', user, { image: 'app:latest', name: 'idle' }));
    // p1 boots a second time: two boots of one instance are two observations
    ok(await h.call('PUT', '/v1/instances/stop', user, { name: 'p1' }));
    ok(await h.call('GET', '/v1/instances/wait', user, { name: 'p1', state: 'stopped', timeout_s: 5 }));
    ok(await h.call('PUT', '/v1/instances/start', user, { name: 'p1', timeout_s: 5 }));
    assert.equal((await h.call('GET', '/v1/nothing', user)).status, 404);
    assert.equal((await h.call('GET', '/v1/instances?count=0', user)).status, 400);

    const fs = await scrape();
    const states = family(fs, 'unihost_instances');
    assert.equal(states.type, 'gauge');
    assert.equal(withLabels(states, { state: 'running' })?.value, 2);
    assert.equal(withLabels(states, { state: 'stopped' })?.value, 1);
    assert.equal(withLabels(states, { state: 'draining' })?.value, 0, 'every state has a series');

    // memory snapshots: the sum of what the records say (one written in here as the controller would)
    const p1 = (await h.daemon.store.read((tx) => tx.instances.all())).find((i) => i.name === 'p1')!;
    const snap = { bytes: 2_500_000, created_at: new Date().toISOString(), reason: 'suspend' as const };
    await h.daemon.store.tx((tx) =>
      tx.instances.updateStatus(p1.id, {
        snapshot: { ...snap, image: p1.image, memory_mb: p1.memory_mb, machine: 'pc', vmm: 'test' },
      }),
    );
    const snaps = family(await scrape(), 'unihost_snapshot_bytes');
    assert.equal(withLabels(snaps, { what: 'bytes' })?.value, 2_500_000);
    assert.equal(withLabels(snaps, { what: 'count' })?.value, 1);
    await h.daemon.store.tx((tx) => tx.instances.updateStatus(p1.id, { snapshot: null }));

    const boots = family(fs, 'unihost_instance_boot_seconds');
    assert.equal(boots.type, 'histogram');
    const b = (boots.data as Sample[])[0]!;
    assert.equal(b.count, 3);
    // the simulated machines boot in 1000 µs (sim-machines.ts)
    assert.ok(Math.abs(Number(b.sum) - 0.003) < 1e-9, `sum ${b.sum}`);
    assert.equal(b.buckets?.['0.01'], 3);
    assert.equal(b.buckets?.['+Inf'], 3);

    const lat = family(fs, 'unihost_api_request_duration_seconds');
    assert.equal(lat.type, 'histogram');
    const creates = withLabels(lat, { method: 'POST', route: '/v1/instances', status: '200' });
    assert.equal(creates?.count, 3);
    assert.ok(Number(creates?.sum) > 0);
    assert.equal(withLabels(lat, { method: 'GET', route: 'unmatched', status: '404' })?.count, 1);
    assert.equal(withLabels(lat, { method: 'GET', route: '/v1/instances', status: '400' })?.count, 1);
    // routes are path patterns: no series per UUID
    assert.ok((lat.data as Sample[]).every((m) => !/[0-9a-f]{8}-/.test(m.labels.route ?? '')));
    // the process's own: its RSS and descriptors, V8's heap by space (what a leak shows in)
    assert.ok(Number((family(fs, 'process_resident_memory_bytes').data as Sample[])[0]?.value) > 0);
    assert.ok(Number((family(fs, 'process_open_fds').data as Sample[])[0]?.value) > 0);
    const heap = family(fs, 'nodejs_heap_space_size_used_bytes');
    assert.ok(Number(withLabels(heap, { space: 'old' })?.value) > 0, JSON.stringify(heap.data));
  });

  test('platform-wide figures need a developer account', async () => {
    const r = await h.call('GET', '/metrics', user);
    assert.equal(r.status, 403, r.text);
    assert.match(r.body.message, /developer account/);
    assert.equal((await h.call('GET', '/metrics', null)).status, 401);
  });
});

describe('request ids', () => {
  test("a client's X-Request-Id comes back and names the request in the logs", async () => {
    const r = await h.call('GET', '/v1/instances/list', user, undefined, { 'x-request-id': 'trace-42.a' });
    assert.equal(r.status, 200);
    const got = await fetch(`${h.url}/v1/instances/list`, {
      headers: { authorization: `Bearer ${user}`, 'x-request-id': 'trace-42.b' },
    });
    assert.equal(got.headers.get('x-request-id'), 'trace-42.b');
    const line = logLines.find((l) => l.reqId === 'trace-42.a');
    assert.ok(line, 'a log line with the request id');
    assert.equal(line.route, '/v1/instances/list');
    assert.equal(line.status, 200);
  });

  test('without one, or with one unfit for logs, the daemon makes a UUID', async () => {
    for (const given of [undefined, 'has space', 'x'.repeat(200), 'quo"te']) {
      const res = await fetch(`${h.url}/v1/healthz`, {
        headers: { authorization: `Bearer ${user}`, ...(given ? { 'x-request-id': given } : {}) },
      });
      assert.match(res.headers.get('x-request-id') ?? '', /^[0-9a-f]{8}-[0-9a-f]{4}-/, String(given));
    }
  });

  test('an entry error is logged with the request id', async () => {
    // an unexpected error inside an entry handler logs with the request's id
    const orig = h.daemon.services.instances.get.bind(h.daemon.services.instances);
    h.daemon.services.instances.get = async () => {
      throw new Error('boom');
    };
    try {
      const r = await h.call('GET', '/v1/instances?name=idle', user, undefined, { 'x-request-id': 'err-7' });
      assert.equal(r.body.data.instances[0].message, 'internal error');
    } finally {
      h.daemon.services.instances.get = orig;
    }
    const line = logLines.find((l) => l.reqId === 'err-7' && l.level === 50);
    assert.ok(line, 'an error line with the request id');
    assert.equal((line.err as { message: string }).message, 'boom');
  });
});
