/**
 * The instances create endpoint and every parameter of it over real HTTP,
 * with the simulated machine controller moving instances through their
 * states. The other instances endpoints are in instances-ops.test.ts.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  bad,
  call,
  create,
  digest,
  entryError,
  get,
  h,
  one,
  useInstancesDaemon,
  waitFor,
  type Any,
} from '../helpers/instances-api.js';

useInstancesDaemon();

describe('create', () => {
  test('defaults', async () => {
    const c = await create({ image: 'nginx:latest' });
    assert.match(c.name, /^nginx-[a-z0-9]{5}$/);
    assert.equal(c.state, 'stopped');
    assert.equal(c.private_fqdn, `${c.name}.internal`);
    assert.equal(c.service_group, undefined);
    assert.equal(c.boot_time_us, undefined);
    const g = await get(c.uuid);
    assert.equal(g.memory_mb, 128);
    assert.equal(g.restart_policy, 'never');
    assert.equal(g.image, digest);
    assert.deepEqual(g.args, []);
    assert.deepEqual(g.env, {});
    assert.equal(g.start_count, 0);
    const p = await create({ image: 'alice/my_app:1.0' });
    assert.match(p.name, /^my-app-[a-z0-9]{5}$/);
  });

  test('args as a shell string and as an array; env', async () => {
    const s = await create({ image: 'nginx:latest', args: `-c 'echo hi there' --x="a b" $HOME *.txt # comment` });
    assert.deepEqual((await get(s.uuid)).args, ['-c', 'echo hi there', '--x=a b', '$HOME', '*.txt']);
    const a = await create({ image: 'nginx:latest', args: ['one two', 'three'], env: { A: '1', B_2: 'x y' } });
    const g = await get(a.uuid);
    assert.deepEqual(g.args, ['one two', 'three']);
    assert.deepEqual(g.env, { A: '1', B_2: 'x y' });
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', args: 'a | b' }), /args/);
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', args: [1] }), /args/);
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', env: { 'A-B': 'x' } }), /env.*'A-B'.*letters/);
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', env: { 'A B"': 'x' } }), /env/);
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', env: { A: 1 } }), /env/);
  });

  test('replicas create N+1 instances with suffixed names', async () => {
    const r = await call('POST', '/v1/instances', { image: 'nginx:latest', name: 'rep', replicas: 2 });
    const es = r.body.data.instances;
    assert.equal(es.length, 3);
    assert.equal(es[0].name, 'rep');
    for (const e of es.slice(1)) assert.match(e.name, /^rep-[a-z0-9]{5}$/);
    assert.equal(new Set(es.map((e: Any) => e.uuid)).size, 3);
    assert.equal(new Set(es.map((e: Any) => e.private_ip)).size, 3);
    const anon = await call('POST', '/v1/instances', { image: 'nginx:latest', replicas: 1 });
    assert.equal(anon.body.data.instances.length, 2);
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', replicas: -1 }), /replicas/);
  });

  test('autostart runs the instance; wait_timeout_ms returns boot_time_us', async () => {
    const a = await create({ image: 'nginx:latest', autostart: true });
    assert.equal(a.state, 'starting');
    assert.equal(a.boot_time_us, undefined);
    assert.equal((await waitFor(a.uuid, 'running')).state, 'running');
    const w = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: 5000 });
    assert.equal(w.state, 'running');
    assert.equal(w.boot_time_us, 1000);
    const m = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: -1 });
    assert.equal(m.state, 'running');
    bad(
      await call('POST', '/v1/instances', { image: 'nginx:latest', wait_timeout_ms: 1000 }),
      /wait_timeout_ms.*autostart/,
    );
    bad(
      await call('POST', '/v1/instances', { image: 'nginx:latest', autostart: false, wait_timeout_ms: 1 }),
      /autostart/,
    );
    bad(
      await call('POST', '/v1/instances', { image: 'nginx:latest', autostart: true, wait_timeout_ms: -2 }),
      /wait_timeout_ms/,
    );
  });

  test('restart_policy values, alias and invalid', async () => {
    for (const [given, stored] of [
      ['never', 'never'],
      ['always', 'always'],
      ['on-failure', 'on-failure'],
      ['on_failure', 'on-failure'],
    ]) {
      const c = await create({ image: 'nginx:latest', restart_policy: given });
      assert.equal((await get(c.uuid)).restart_policy, stored);
    }
    bad(
      await call('POST', '/v1/instances', { image: 'nginx:latest', restart_policy: 'sometimes' }),
      /restart_policy.*never, always, on-failure/,
    );
  });

  test('features: scale-to-zero needs a service group; invalid feature', async () => {
    const c = await create({
      image: 'nginx:latest',
      features: ['scale-to-zero'],
      service_group: { services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }] },
    });
    assert.deepEqual((await get(c.uuid)).features, ['scale-to-zero']);
    const as = await call('GET', '/v1/services/autoscale', { uuid: c.service_group.uuid });
    const cfg = as.body.data.service_groups[0];
    assert.equal(cfg.min_size, 0);
    assert.equal(cfg.max_size, 1);
    assert.equal(cfg.master.uuid, c.uuid);
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', features: ['scale-to-zero'] }), /service_group/);
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', features: ['turbo'] }), /features/);
  });

  test('memory limits, image minimum, unknown image, duplicate name are per-entry errors', async () => {
    entryError(await call('POST', '/v1/instances', { image: 'nginx:latest', memory_mb: 4096 }), 7, /memory_mb.*limits/);
    entryError(await call('POST', '/v1/instances', { image: 'nginx:latest', memory_mb: 8 }), 7, /memory_mb/);
    entryError(await call('POST', '/v1/instances', { image: 'big:latest' }), 20, /256/);
    assert.equal((await create({ image: 'big:latest', memory_mb: 256 })).state, 'stopped');
    entryError(await call('POST', '/v1/instances', { image: 'nosuch:latest' }), 8, /nosuch/);
    entryError(await call('POST', '/v1/instances', { image: 'bob/my_app:1.0' }), 8, /bob\/my_app/);
    await create({ image: 'nginx:latest', name: 'dup' });
    entryError(await call('POST', '/v1/instances', { image: 'nginx:latest', name: 'DUP' }), 23, /dup/);
    // a batch: one fails, the other is created
    const r = await call('POST', '/v1/instances', [
      { image: 'nginx:latest', name: 'dup' },
      { image: 'nginx:latest', name: 'dup-2' },
    ]);
    assert.equal(r.body.status, 'partial_success');
    assert.deepEqual(
      r.body.data.instances.map((e: Any) => [e.status, e.error]),
      [
        ['error', 23],
        ['success', undefined],
      ],
    );
  });

  test('service_group by name, by uuid, new description, empty object', async () => {
    const sg = (
      await call('POST', '/v1/services', {
        name: 'web-group',
        services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
      })
    ).body.data.service_groups[0];
    const byName = await create({ image: 'nginx:latest', service_group: { name: 'web-group' } });
    assert.equal(byName.service_group.uuid, sg.uuid);
    assert.equal(byName.service_group.name, 'web-group');
    assert.deepEqual(byName.service_group.domains, sg.domains);
    const byUuid = await create({ image: 'nginx:latest', service_group: { uuid: sg.uuid } });
    assert.equal(byUuid.service_group.name, 'web-group');
    assert.deepEqual((await get(byUuid.uuid)).service_group, byName.service_group);

    const fresh = await create({
      image: 'nginx:latest',
      service_group: {
        services: [{ port: 443, destination_port: 80, handlers: ['tls', 'http'] }],
        domains: [{ name: 'myapp' }],
      },
    });
    assert.match(fresh.service_group.name, /^[a-z]+-[a-z]+-[a-z0-9]{8}$/);
    assert.deepEqual(fresh.service_group.domains, [{ fqdn: 'myapp.unihost.localhost' }]);
    const g = (await call('GET', '/v1/services', { uuid: fresh.service_group.uuid })).body.data.service_groups[0];
    assert.equal(g.persistent, false);
    assert.deepEqual(g.instances, [{ uuid: fresh.uuid, name: fresh.name }]);

    const empty = await create({ image: 'nginx:latest', service_group: {} });
    assert.deepEqual(empty.service_group.domains, []);
    const eg = (await call('GET', '/v1/services', { uuid: empty.service_group.uuid })).body.data.service_groups[0];
    assert.deepEqual(eg.services, []);

    entryError(
      await call('POST', '/v1/instances', { image: 'nginx:latest', service_group: { name: 'no-group' } }),
      8,
      /no-group/,
    );
    bad(
      await call('POST', '/v1/instances', {
        image: 'nginx:latest',
        service_group: { name: 'web-group', services: [] },
      }),
      /service_group/,
    );
    bad(
      await call('POST', '/v1/instances', {
        image: 'nginx:latest',
        service_group: { name: 'web-group', uuid: sg.uuid },
      }),
      /not both/,
    );
    // a domain already in use fails the entry, and nothing of it is left behind
    const before = (await call('GET', '/v1/instances/list')).body.data.instances.length;
    entryError(
      await call('POST', '/v1/instances', {
        image: 'nginx:latest',
        service_group: { services: [{ port: 443, handlers: ['tls', 'http'] }], domains: [{ name: 'myapp' }] },
      }),
      24,
    );
    assert.equal((await call('GET', '/v1/instances/list')).body.data.instances.length, before);
  });

  test('volumes: new with size_mb, existing by name', async () => {
    const c = await create({ image: 'nginx:latest', volumes: [{ size_mb: 4, at: '/data' }] });
    const [v] = (await get(c.uuid)).volumes;
    assert.match(v.name, /^vol-[a-z0-9]{5}$/);
    assert.equal(v.at, '/data');
    assert.equal(v.readonly, false);
    const vol = (await call('GET', '/v1/volumes', { uuid: v.uuid })).body.data.volumes[0];
    assert.equal(vol.size_mb, 4);
    assert.equal(vol.persistent, false);
    assert.deepEqual(vol.attached_to, [{ uuid: c.uuid }]);

    await call('POST', '/v1/volumes', { name: 'keep', size_mb: 2 });
    await h.until(
      async () => (await call('GET', '/v1/volumes', { name: 'keep' })).body.data.volumes[0].state === 'available',
    );
    const e = await create({ image: 'nginx:latest', volumes: [{ name: 'keep', at: '/mnt/keep', readonly: true }] });
    assert.deepEqual(
      (await get(e.uuid)).volumes.map((x: Any) => [x.name, x.at, x.readonly]),
      [['keep', '/mnt/keep', true]],
    );
    // attached now: a second instance cannot take it
    const taken = await call('POST', '/v1/instances', { image: 'nginx:latest', volumes: [{ name: 'keep', at: '/k' }] });
    assert.ok([11, 15].includes(one(taken).error), taken.text); // FailedWrongVMState (not available) or Attached
    assert.match(one(taken).message, /keep/);
    bad(
      await call('POST', '/v1/instances', { image: 'nginx:latest', volumes: [{ size_mb: 1, at: 'relative' }] }),
      /absolute/,
    );
    bad(
      await call('POST', '/v1/instances', { image: 'nginx:latest', volumes: [{ name: 'keep', size_mb: 1, at: '/x' }] }),
      /exactly one/,
    );
    bad(await call('POST', '/v1/instances', { image: 'nginx:latest', volumes: [{ at: '/x' }] }), /exactly one/);
    bad(
      await call('POST', '/v1/instances', { image: 'nginx:latest', replicas: 1, volumes: [{ size_mb: 1, at: '/x' }] }),
      /replicas/,
    );
  });
});
