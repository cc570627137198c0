/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * The database lost while the daemon runs (PostgreSQL stopped under it,
 * then started again): the API answers 503 with a clear message at once
 * (no hang, no 500), instances keep running, nothing acknowledged is lost,
 * and once the server is back the daemon reconnects and its change feed
 * follows commits again. Its own server: stopping it must not disturb other
 * tests.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { openStore } from '../../src/store/open.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { postgresMissing, startTestPostgres, type TestPostgres } from '../helpers/postgres.js';
import { simMachines } from '../helpers/sim-machines.js';
import { requirePart } from '../helpers/require.js';

const missing = postgresMissing();
const data = (r: { body: any }) => Object.values(r.body.data as Record<string, any[]>)[0]!;

describe('PostgreSQL lost while the daemon runs', { skip: requirePart(missing) }, () => {
  let pg: TestPostgres;
  let url: string;
  let h: Harness;
  let token: string;

  before(async () => {
    pg = startTestPostgres();
    url = await pg.createDb();
    h = await startHarness({ store: { url } }, (s) => [simMachines(s)]);
    await h.image('app:latest');
    token = await h.user('alice');
  });
  after(async () => {
    await h?.close();
    pg?.close();
  });

  test('503 while it is down; instances keep running; everything acknowledged is there when it is back', async () => {
    const made = data(
      await h.call('POST', '/v1/instances', token, {
        name: 'web',
        image: 'app:latest',
        autostart: true,
        wait_timeout_ms: 5000,
      }),
    )[0];
    assert.equal(made.state, 'running');

    pg.stopServer();
    for (const [method, path, body] of [
      ['GET', '/v1/instances', { name: 'web' }],
      ['POST', '/v1/instances', { name: 'lost', image: 'app:latest' }],
      ['PUT', '/v1/instances/stop', { name: 'web' }],
    ] as const) {
      const r = await h.call(method, path, token, body);
      assert.equal(r.status, 503, `${method} ${path}: ${r.text}`);
      assert.equal(r.body.status, 'error');
      assert.match(r.body.message, /the database is unreachable \(PostgreSQL on the socket .*database 'uh_[0-9a-f]+'/);
      assert.equal(r.body.errors[0].status, 503);
    }

    pg.startServer();
    const deadline = Date.now() + 20_000;
    let back: any;
    while (Date.now() < deadline) {
      const r = await h.call('GET', '/v1/instances', token, { name: 'web' });
      if (r.status === 200) {
        back = data(r)[0];
        break;
      }
      await new Promise((res) => setTimeout(res, 200));
    }
    assert.ok(back, 'the daemon answers again once the server is back');
    assert.deepEqual(
      [back.uuid, back.state, back.start_count],
      [made.uuid, 'running', 1],
      'kept running, not restarted',
    );
    const names = data(await h.call('GET', '/v1/instances/list', token)).map((i: any) => i.name);
    assert.deepEqual(names, ['web'], 'the create refused while it was down left nothing');

    // the feed follows commits of another process again (its LISTEN connection came back)
    const other = await openStore(url, '/nonexistent/unused.db');
    try {
      const waiting = h.call('GET', '/v1/instances/wait', token, { name: 'web', state: 'stopped', timeout_ms: 10_000 });
      await new Promise((res) => setTimeout(res, 200));
      const r = await h.call('PUT', '/v1/instances/stop', token, { name: 'web' });
      assert.equal(data(r)[0].status, 'success', r.text);
      assert.equal(data(await waiting)[0].state, 'stopped');
      const alice = await other.read((tx) => tx.users.getByName('alice'));
      assert.ok(alice, 'another process reads what the daemon wrote');
    } finally {
      await other.close();
    }
  });
});
