/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * The upgrade path: a data dir written by an earlier release (commit
 * e9e97cc: schema 3, before the spec/status split, placement and the change
 * feed; test/fixtures/datadir-e9e97cc) opens with today's code, and nothing
 * is lost: users and their tokens, instances with every field the user gave,
 * addresses, groups, domains, autoscale, volumes and their attachments,
 * quotas and the event log.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { MIGRATIONS } from '../../src/store/sqlite/migrations.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

const FIXTURE = join(import.meta.dirname, '../fixtures/datadir-e9e97cc');
const expected = JSON.parse(readFileSync(join(FIXTURE, 'expected.json'), 'utf8')) as Record<string, any>;
let h: Harness;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'unihost-upgrade-'));
  copyFileSync(join(FIXTURE, 'unihost.db'), join(dir, 'unihost.db'));
  const before = new Database(join(dir, 'unihost.db'), { readonly: true });
  assert.equal(before.pragma('user_version', { simple: true }), 3, 'the fixture is a schema-3 data dir');
  before.close();
  // SQLite whatever UNIHOST_TEST_STORE says: the fixture is a SQLite data dir
  // the simulated host: the store is under test, not the host's files (the fixture holds the database only)
  h = await startHarness({ dataDir: dir, store: { url: '' } }, (s) => [simMachines(s)]);
});
after(async () => h?.close());

const data = (r: { body: any }) => Object.values(r.body.data as Record<string, any[]>)[0]!;

/** The fields an instance keeps across a restart (state and run figures may move: its VM did not survive). */
const kept = (i: any) => {
  const {
    status: _s,
    state: _st,
    uptime_ms: _u,
    stopped_at: _sa,
    stop_reason: _r,
    exit_code: _e,
    stop_code: _c,
    ...rest
  } = i;
  return rest;
};

/**
 * `got` with only the fields `want` has: what the old release showed must be
 * there unchanged; fields added since (e.g. a volume's `quota_policy`, an
 * event's stop fields) may come beside them.
 */
const asBefore = (got: any[], want: any[]) =>
  got.map((g, i) => Object.fromEntries(Object.keys(want[i] ?? g).map((k) => [k, g[k]])));

test('the schema is brought to the current version', () => {
  const db = new Database(join(dir, 'unihost.db'), { readonly: true });
  try {
    assert.equal(db.pragma('user_version', { simple: true }), MIGRATIONS.length);
    const unplaced = db.prepare('SELECT count(*) AS n FROM instances WHERE host_id IS NULL').get() as { n: number };
    assert.equal(unplaced.n, 0, 'every instance is placed on the host of the daemon that opened it');
  } finally {
    db.close();
  }
});

test('every user keeps its token, instances, volumes, groups and quotas', async () => {
  for (const name of ['alice', 'bob']) {
    const want = expected[name];
    const token = want.token as string;
    const list = data(await h.call('GET', '/v1/instances/list', token));
    const got = data(
      await h.call(
        'GET',
        '/v1/instances',
        token,
        list.map((i: any) => ({ uuid: i.uuid })),
      ),
    );
    assert.deepEqual(got.map(kept), want.instances.map(kept), `${name}'s instances`);
    const volumes = data(await h.call('GET', '/v1/volumes', token));
    assert.deepEqual(asBefore(volumes, want.volumes), want.volumes, `${name}'s volumes`);
    assert.deepEqual(data(await h.call('GET', '/v1/services/list', token)), want.groups, `${name}'s groups`);
    const quotas = data(await h.call('GET', '/v1/users/quotas', token))[0];
    // quota keys added since (with their defaults) may appear; the old ones keep their values
    assert.deepEqual(asBefore([quotas.hard], [want.quotas[0].hard])[0], want.quotas[0].hard, `${name}'s quota limits`);
    assert.equal(quotas.used.instances, want.quotas[0].used.instances);
  }
});

test("alice's autoscale configuration and the volume attached to 'db' are there", async () => {
  const token = expected.alice.token as string;
  const conf = data(await h.call('GET', '/v1/services/autoscale', token, { name: 'shop' }))[0];
  assert.deepEqual([conf.status, conf.master.name, conf.max_size, conf.policies[0].name], ['success', 'web', 3, 'cpu']);
  const vol = data(await h.call('GET', '/v1/volumes', token, { name: 'data' }))[0];
  const db = expected.alice.instances.find((i: any) => i.name === 'db');
  assert.deepEqual(vol.attached_to, [{ uuid: db.uuid }]);
});

test('the event log keeps its history; new events follow it', async () => {
  const token = expected.alice.token as string;
  const alice = await h.daemon.store.read((tx) => tx.users.getByName('alice'));
  const log = await h.daemon.store.read((tx) => tx.events.after(alice!.id, 0, {}, 1000));
  const old = expected.alice.events as any[];
  assert.deepEqual(asBefore(log.slice(0, old.length), old), old);
  const stopped = expected.alice.instances.find((i: any) => i.name === 'stopped-one');
  const r = await h.call('PUT', '/v1/instances/start', token, { uuid: stopped.uuid, wait_timeout_ms: 5000 });
  assert.equal(data(r)[0].state, 'running', r.text);
  const now = await h.daemon.store.read((tx) => tx.events.after(alice!.id, 0, {}, 1000));
  const added = now.slice(log.length);
  assert.ok(added.length >= 2, 'the start was logged');
  assert.ok(added[0]!.id > log.at(-1)!.id, 'new event ids follow the old ones');
});
