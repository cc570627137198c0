/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness, type Reply } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import type { Hard } from '../../src/store/types.js';

let h: Harness;

function ok(r: Reply, plural: string): any[] {
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.status, 'success', r.text);
  return r.body.data[plural];
}

function quotaError(r: Reply, plural: string, kind: keyof Hard): void {
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.status, 'error', r.text);
  const e = r.body.data[plural][0];
  assert.equal(e.error, 19, r.text);
  assert.match(e.message, new RegExp(`quota '${kind}' exceeded`));
}

const quotas = async (token: string) => ok(await h.call('GET', '/v1/users/quotas', token), 'quotas')[0];
const instance = (token: string, body: object = {}) =>
  h.call('POST', '/v1/instances', token, { image: 'app:latest', ...body });
const SVC443 = { port: 443, handlers: ['http', 'tls'] };

let n = 0;
/** A new user with `hard` overrides; returns its token. */
async function userWith(hard: Partial<Hard>): Promise<string> {
  const name = `q-${++n}`;
  const token = await h.user(name);
  await h.daemon.services.users.setQuotas(name, { hard });
  return token;
}

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  await h.image('app:latest');
});
after(async () => h.close());

describe('reading quotas', () => {
  test('a new user: nothing used, hard and limits are the configured defaults', async () => {
    const t = await h.user('fresh');
    const id = (await h.daemon.store.read((tx) => tx.users.getByName('fresh')))!.id;
    const r = await h.call('GET', '/v1/users/quotas', t);
    const [q] = ok(r, 'quotas');
    assert.deepEqual(q, {
      status: 'success',
      uuid: id,
      used: {
        instances: 0,
        live_instances: 0,
        live_memory_mb: 0,
        service_groups: 0,
        services: 0,
        volumes: 0,
        total_volume_mb: 0,
        registry_mb: 0,
        domains: 0,
        certificates: 0,
        snapshot_mb: 0,
      },
      hard: h.daemon.config.defaultQuotas.hard,
      limits: h.daemon.config.defaultQuotas.limits,
    });
    assert.deepEqual(ok(await h.call('GET', `/v1/users/${id}/quotas`, t), 'quotas'), [q]);
  });

  test("another user's uuid is not found", async () => {
    const t = await h.user('nosy');
    const other = randomUUID();
    const r = await h.call('GET', `/v1/users/${other}/quotas`, t);
    assert.equal(r.body.status, 'error', r.text);
    assert.equal(r.body.data.quotas[0].error, 8);
    assert.match(r.body.data.quotas[0].message, new RegExp(other));
    const fresh = (await h.daemon.store.read((tx) => tx.users.getByName('fresh')))!.id;
    assert.equal((await h.call('GET', `/v1/users/${fresh}/quotas`, t)).body.data.quotas[0].error, 8);
  });

  test('used reflects instances, live ones, groups, services and volumes', async () => {
    const t = await h.user('busy');
    ok(
      await h.call('POST', '/v1/services', t, { services: [SVC443, { port: 80, handlers: ['http', 'redirect'] }] }),
      'service_groups',
    );
    ok(
      await instance(t, {
        memory_mb: 64,
        autostart: true,
        wait_timeout_ms: 10000,
        service_group: { services: [{ port: 8443, handlers: ['tls'] }] },
      }),
      'instances',
    );
    ok(await instance(t, { memory_mb: 32, volumes: [{ size_mb: 8, at: '/data' }] }), 'instances');
    ok(await h.call('POST', '/v1/volumes', t, { size_mb: 24 }), 'volumes');
    const q = await quotas(t);
    assert.deepEqual(q.used, {
      instances: 2,
      live_instances: 1,
      live_memory_mb: 64,
      service_groups: 2,
      services: 3,
      volumes: 2,
      total_volume_mb: 32,
      registry_mb: 0,
      domains: 2,
      certificates: 0,
      snapshot_mb: 0,
    });
  });

  test('overrides set by the admin show in hard and limits', async () => {
    const t = await h.user('custom');
    await h.daemon.services.users.setQuotas('custom', { hard: { instances: 3 }, limits: { max_volume_mb: 100 } });
    const q = await quotas(t);
    assert.equal(q.hard.instances, 3);
    assert.equal(q.hard.volumes, h.daemon.config.defaultQuotas.hard.volumes);
    assert.equal(q.limits.max_volume_mb, 100);
    assert.equal(q.limits.min_volume_mb, h.daemon.config.defaultQuotas.limits.min_volume_mb);
    // The new limit applies at once, even to a token used just before.
    const r = await h.call('POST', '/v1/volumes', t, { size_mb: 101 });
    assert.equal(r.body.data.volumes[0].error, 7, r.text);
  });
});

describe('hard limits are enforced (code 19) and nothing is created', () => {
  test('instances', async () => {
    const t = await userWith({ instances: 2 });
    ok(await instance(t), 'instances');
    quotaError(await instance(t, { replicas: 1 }), 'instances', 'instances');
    ok(await instance(t), 'instances');
    quotaError(await instance(t), 'instances', 'instances');
    assert.equal((await quotas(t)).used.instances, 2);
    assert.equal(ok(await h.call('GET', '/v1/instances/list', t), 'instances').length, 2);
  });

  test('live_instances, on create and on start', async () => {
    const t = await userWith({ live_instances: 1 });
    ok(await instance(t, { autostart: true }), 'instances');
    quotaError(await instance(t, { autostart: true }), 'instances', 'live_instances');
    const [stopped] = ok(await instance(t, { name: 'sleeper' }), 'instances');
    quotaError(await h.call('PUT', '/v1/instances/start', t, { uuid: stopped.uuid }), 'instances', 'live_instances');
    const q = await quotas(t);
    assert.equal(q.used.live_instances, 1);
    assert.equal(q.used.instances, 2);
  });

  test('live_memory_mb', async () => {
    const t = await userWith({ live_memory_mb: 200 });
    ok(await instance(t, { autostart: true, memory_mb: 128 }), 'instances');
    quotaError(await instance(t, { autostart: true, memory_mb: 128 }), 'instances', 'live_memory_mb');
    ok(await instance(t, { autostart: true, memory_mb: 64 }), 'instances');
    const [big] = ok(await instance(t, { memory_mb: 16 }), 'instances');
    quotaError(await h.call('PUT', '/v1/instances/start', t, { uuid: big.uuid }), 'instances', 'live_memory_mb');
    assert.equal((await quotas(t)).used.live_memory_mb, 192);
  });

  test('service_groups, also for a group created with an instance', async () => {
    const t = await userWith({ service_groups: 1 });
    ok(await h.call('POST', '/v1/services', t, { services: [SVC443] }), 'service_groups');
    quotaError(await h.call('POST', '/v1/services', t, { services: [SVC443] }), 'service_groups', 'service_groups');
    quotaError(await instance(t, { service_group: { services: [SVC443] } }), 'instances', 'service_groups');
    const q = await quotas(t);
    assert.equal(q.used.service_groups, 1);
    assert.equal(q.used.instances, 0, 'the instance of a refused group is not created');
  });

  test('services', async () => {
    const t = await userWith({ services: 2 });
    ok(await h.call('POST', '/v1/services', t, { services: [SVC443] }), 'service_groups');
    quotaError(
      await h.call('POST', '/v1/services', t, {
        services: [
          { port: 8443, handlers: ['tls'] },
          { port: 9443, handlers: ['tls'] },
        ],
      }),
      'service_groups',
      'services',
    );
    ok(await h.call('POST', '/v1/services', t, { services: [{ port: 8443, handlers: ['tls'] }] }), 'service_groups');
    const q = await quotas(t);
    assert.equal(q.used.services, 2);
    assert.equal(q.used.service_groups, 2);
  });

  test('volumes and total_volume_mb', async () => {
    const t = await userWith({ volumes: 2, total_volume_mb: 50 });
    ok(await h.call('POST', '/v1/volumes', t, { size_mb: 30 }), 'volumes');
    quotaError(await h.call('POST', '/v1/volumes', t, { size_mb: 21 }), 'volumes', 'total_volume_mb');
    quotaError(await instance(t, { volumes: [{ size_mb: 21, at: '/data' }] }), 'instances', 'total_volume_mb');
    ok(await h.call('POST', '/v1/volumes', t, { size_mb: 20 }), 'volumes');
    quotaError(await h.call('POST', '/v1/volumes', t, { size_mb: 1 }), 'volumes', 'volumes');
    const q = await quotas(t);
    assert.equal(q.used.volumes, 2);
    assert.equal(q.used.total_volume_mb, 50);
    assert.equal(q.used.instances, 0);
  });
});

describe('concurrent creates never overshoot', () => {
  test('50 concurrent POST /v1/instances against a quota of 10', async () => {
    const t = await userWith({ instances: 10 });
    const rs = await Promise.all(Array.from({ length: 50 }, () => instance(t)));
    const codes = rs.map((r) => (r.body.status === 'success' ? 'ok' : r.body.data.instances[0].error));
    assert.equal(codes.filter((c) => c === 'ok').length, 10, codes.join());
    assert.ok(
      codes.every((c) => c === 'ok' || c === 19),
      codes.join(),
    );
    assert.equal((await quotas(t)).used.instances, 10);
    assert.equal(ok(await h.call('GET', '/v1/instances/list', t), 'instances').length, 10);
  });

  test('50 concurrent volume creates against a quota of 10', async () => {
    const t = await userWith({ volumes: 10 });
    const rs = await Promise.all(Array.from({ length: 50 }, () => h.call('POST', '/v1/volumes', t, { size_mb: 4 })));
    const codes = rs.map((r) => (r.body.status === 'success' ? 'ok' : r.body.data.volumes[0].error));
    assert.equal(codes.filter((c) => c === 'ok').length, 10, codes.join());
    assert.ok(
      codes.every((c) => c === 'ok' || c === 19),
      codes.join(),
    );
    const q = await quotas(t);
    assert.equal(q.used.volumes, 10);
    assert.equal(q.used.total_volume_mb, 40);
  });
});
