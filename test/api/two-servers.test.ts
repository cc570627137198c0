/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * Two API servers, one PostgreSQL: server A runs every role (the host's
 * agent with simulated VMs), server B only the API (`--role api`). Both give
 * the same answers; quotas and unique names hold under concurrent creates
 * split across both; a wait on B returns when A's change lands; live figures
 * A measures reach B through the store; a change feed notification that
 * never came is healed by the poll.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { FiguresPublisher, LocalFigures } from '../../src/reconcile/figures.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { postgresMissing, testPostgres } from '../helpers/postgres.js';
import { simMachines } from '../helpers/sim-machines.js';
import { requirePart } from '../helpers/require.js';

const missing = postgresMissing();
const data = (r: { body: any }) => Object.values(r.body.data as Record<string, any[]>)[0]!;

describe('two API servers on one PostgreSQL', { skip: requirePart(missing) }, () => {
  let a: Harness;
  let b: Harness;
  let token: string;

  before(async () => {
    const url = await testPostgres().createDb();
    a = await startHarness({ store: { url }, defaultQuotas: { hard: { instances: 30, live_instances: 64 } } }, (s) => {
      const sim = simMachines(s);
      return [sim, new FiguresPublisher(s, s.figures as LocalFigures, 'a', pino({ level: 'silent' }))];
    });
    b = await startHarness({ store: { url }, roles: ['api'], defaultQuotas: { hard: { instances: 30 } } });
    await a.image('app:latest');
    token = await a.user('alice', true);
  });
  after(async () => {
    await b?.close();
    await a?.close();
  });

  test('a user made through one server authenticates on the other; both give the same answers', async () => {
    const created = data(await b.call('POST', '/v1/instances', token, { name: 'first', image: 'app:latest' }))[0];
    assert.equal(created.status, 'success', JSON.stringify(created));
    const fromA = data(await a.call('GET', '/v1/instances', token, { name: 'first' }))[0];
    const fromB = data(await b.call('GET', '/v1/instances', token, { name: 'first' }))[0];
    assert.deepEqual(fromA, fromB);
    assert.equal(fromA.state, 'stopped');
  });

  test('50 concurrent creates split across both servers: the quota (30) and unique names hold', async () => {
    // 25 names, each asked for once on each server: at most one of each pair wins
    const calls = Array.from({ length: 50 }, (_, k) =>
      (k % 2 ? a : b).call('POST', '/v1/instances', token, { name: `race-${k >> 1}`, image: 'app:latest' }),
    );
    const replies = await Promise.all(calls);
    const entries = replies.map((r) => data(r)[0]);
    const won = entries.filter((e) => e.status === 'success');
    const lost = entries.filter((e) => e.status !== 'success');
    const names = won.map((e) => e.name);
    assert.equal(new Set(names).size, names.length, `no name twice: ${names.join(' ')}`);
    assert.equal(won.length, 25, 'each of the 25 names once (29 of 30 allowed are free)');
    for (const e of lost) assert.match(e.message, /already exists|quota/, JSON.stringify(e));
    const more = await Promise.all(
      Array.from({ length: 10 }, (_, k) =>
        (k % 2 ? a : b).call('POST', '/v1/instances', token, { name: `more-${k}`, image: 'app:latest' }),
      ),
    );
    const okMore = more.map((r) => data(r)[0]).filter((e) => e.status === 'success').length;
    assert.equal(okMore, 4, 'up to the quota of 30, not one more, whichever server is asked');
    const listed = data(await b.call('GET', '/v1/instances/list', token));
    assert.equal(listed.length, 30);
  });

  test("a wait on B returns when A's change lands", async () => {
    const t0 = Date.now();
    const waiting = b.call('GET', '/v1/instances/wait', token, { name: 'first', state: 'running', timeout_ms: 10_000 });
    await new Promise((r) => setTimeout(r, 200)); // B is waiting
    const started = data(await a.call('PUT', '/v1/instances/start', token, { name: 'first' }))[0];
    assert.equal(started.status, 'success');
    const w = data(await waiting)[0];
    assert.deepEqual([w.status, w.state], ['success', 'running']);
    assert.ok(Date.now() - t0 < 5000, 'well before its timeout');
  });

  test('B, which measures nothing, shows the figures A publishes through the store', async () => {
    const deadline = Date.now() + 12_000;
    let m: any;
    for (;;) {
      m = data(await b.call('GET', '/v1/instances/metrics', token, { name: 'first' }))[0];
      if (m.rss_bytes > 0 || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const direct = data(await a.call('GET', '/v1/instances/metrics', token, { name: 'first' }))[0];
    assert.ok(m.rss_bytes > 0, `B shows A's figures: ${JSON.stringify(m)}`);
    assert.equal(m.rss_bytes, direct.rss_bytes);
  });
});
