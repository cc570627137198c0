/**
 * The instances endpoints other than create (get, delete, list, start and
 * stop, wait, log) and the instance quotas over real HTTP, with the simulated
 * machine controller moving instances through their states.
 */
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ConsoleLog } from '../../src/machines/console-log.js';
import {
  bad,
  call,
  create,
  digest,
  entryError,
  get,
  h,
  ok,
  useInstancesDaemon,
  waitFor,
  type Any,
} from '../helpers/instances-api.js';

useInstancesDaemon();

describe('get', () => {
  test('every field of the Instance resource', async () => {
    const c = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: 5000, env: { K: 'v' } });
    const g = await get(c.uuid);
    for (const k of [
      'uuid',
      'name',
      'created_at',
      'state',
      'image',
      'memory_mb',
      'args',
      'env',
      'start_count',
      'started_at',
      'uptime_ms',
      'boot_time_us',
      'restart_policy',
      'restart',
      'restart_count',
      'private_fqdn',
      'private_ip',
      'volumes',
      'network_interfaces',
    ]) {
      assert.ok(k in g, `missing ${k}`);
    }
    assert.equal(g.state, 'running');
    assert.equal(g.start_count, 1);
    assert.ok(!Number.isNaN(Date.parse(g.created_at)) && !Number.isNaN(Date.parse(g.started_at)));
    assert.equal(g.stopped_at, undefined);
    assert.equal(g.stop_reason, undefined); // only readable from draining on
    assert.deepEqual(g.restart, { attempt: 0 });
    assert.equal(g.restart_count, 0);
    assert.equal(g.private_fqdn, `${g.name}.internal`);
    assert.match(g.private_ip, /^10\.88\.\d+\.\d+$/);
    assert.notEqual(g.private_ip, '10.88.0.1'); // the gateway
    assert.equal(g.network_interfaces.length, 1);
    const [nic] = g.network_interfaces;
    assert.equal(nic.private_ip, g.private_ip);
    assert.match(nic.mac, /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/);
    assert.match(nic.uuid, /^[0-9a-f-]{36}$/);
    for (const k of ['vmm_start_time_us', 'vmm_load_time_us', 'vmm_ready_time_us', 'net_time_us'])
      assert.ok(!(k in g), k);
    ok(await call('PUT', '/v1/instances/stop', { uuid: c.uuid }));
    const s = await waitFor(c.uuid, 'stopped');
    assert.equal(s.state, 'stopped');
    const gs = await get(c.uuid);
    assert.ok(!Number.isNaN(Date.parse(gs.stopped_at)));
    assert.equal(typeof gs.uptime_ms, 'number');
    assert.deepEqual([gs.stop_reason, gs.exit_code, gs.stop_code], [15, 0, 0]);
  });

  test('developer-only timing fields only for developers', async () => {
    // The simulated controller records fixed timings; the real one measures them.
    const dev = await h.user('devuser', true);
    const d = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: 5000 }, dev);
    const g = await get(d.uuid, dev);
    assert.deepEqual(
      [g.vmm_start_time_us, g.vmm_load_time_us, g.vmm_ready_time_us, g.net_time_us],
      [100, 200, 300, 400],
    );
  });

  test('private IPs are unique and from the subnet', async () => {
    const r = await call('GET', '/v1/instances');
    const ips = r.body.data.instances.map((i: Any) => i.private_ip);
    assert.equal(new Set(ips).size, ips.length);
  });
});

describe('delete', () => {
  test('previous_state; the instance is gone', async () => {
    const c = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: 5000 });
    const d = ok(await call('DELETE', `/v1/instances/${c.uuid}`));
    assert.deepEqual([d.uuid, d.name, d.previous_state], [c.uuid, c.name, 'running']);
    entryError(await call('GET', '/v1/instances', { uuid: c.uuid }), 8);
    entryError(await call('DELETE', '/v1/instances', { uuid: c.uuid }), 8);
    const s = await create({ image: 'nginx:latest' });
    assert.equal(ok(await call('DELETE', '/v1/instances', { name: s.name })).previous_state, 'stopped');
  });

  test('an implicit group and a volume created with the instance go with it; a persistent volume is detached', async () => {
    const c = await create({
      image: 'nginx:latest',
      service_group: { services: [{ port: 443, handlers: ['tls', 'http'] }] },
      volumes: [{ size_mb: 1, at: '/d' }],
    });
    const volUuid = (await get(c.uuid)).volumes[0].uuid;
    ok(await call('DELETE', '/v1/instances', { uuid: c.uuid }));
    assert.equal(
      (await call('GET', '/v1/services', { uuid: c.service_group.uuid })).body.data.service_groups[0].error,
      8,
    );
    assert.equal((await call('GET', '/v1/volumes', { uuid: volUuid })).body.data.volumes[0].error, 8);

    await call('POST', '/v1/volumes', { name: 'persist', size_mb: 2 });
    await h.until(
      async () => (await call('GET', '/v1/volumes', { name: 'persist' })).body.data.volumes[0].state === 'available',
    );
    // a persistent group of its own (created explicitly, not with an instance)
    await call('POST', '/v1/services', {
      name: 'web-group',
      services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
    });
    const p = await create({
      image: 'nginx:latest',
      volumes: [{ name: 'persist', at: '/p' }],
      service_group: { name: 'web-group' },
    });
    ok(await call('DELETE', '/v1/instances', { uuid: p.uuid }));
    const v = (await call('GET', '/v1/volumes', { name: 'persist' })).body.data.volumes[0];
    assert.equal(v.status, 'success');
    assert.deepEqual(v.attached_to, []);
    assert.equal(v.state, 'available');
    // an explicit (persistent) group stays
    assert.equal(
      (await call('GET', '/v1/services', { name: 'web-group' })).body.data.service_groups[0].status,
      'success',
    );
  });
});

describe('list', () => {
  let u: string;
  let ids: string[];
  before(async () => {
    u = await h.user('lister');
    ids = [];
    for (const autostart of [false, true, false])
      ids.push((await create({ image: 'nginx:latest', autostart, wait_timeout_ms: autostart ? 5000 : 0 }, u)).uuid);
  });

  test('all, and filtered by state', async () => {
    const all = (await call('GET', '/v1/instances/list', undefined, u)).body.data.instances;
    assert.deepEqual(
      all.map((i: Any) => i.uuid),
      ids,
    );
    assert.deepEqual(Object.keys(all[0]).sort(), ['name', 'uuid']);
    const running = (await call('GET', '/v1/instances/list', { state: 'running' }, u)).body.data.instances;
    assert.deepEqual(
      running.map((i: Any) => i.uuid),
      [ids[1]],
    );
    const stopped = (await call('GET', '/v1/instances/list?state=stopped', undefined, u)).body.data.instances;
    assert.deepEqual(
      stopped.map((i: Any) => i.uuid),
      [ids[0], ids[2]],
    );
    bad(await call('GET', '/v1/instances/list', { state: 'sleeping' }, u), /state/);
    bad(await call('GET', '/v1/instances/list', [{}], u), /array/);
  });

  test('compat GET /v1/instances without a target lists, with count and from', async () => {
    const all = (await call('GET', '/v1/instances', undefined, u)).body.data.instances;
    assert.deepEqual(
      all.map((i: Any) => i.uuid),
      ids,
    );
    assert.equal(all[0].image, digest); // full details by default
    assert.equal(all[0].status, undefined);
    const p1 = (await call('GET', '/v1/instances?count=2', undefined, u)).body.data.instances;
    assert.deepEqual(
      p1.map((i: Any) => i.uuid),
      ids.slice(0, 2),
    );
    const p2 = (await call('GET', `/v1/instances?count=2&from=${ids[1]}`, undefined, u)).body.data.instances;
    assert.deepEqual(
      p2.map((i: Any) => i.uuid),
      ids.slice(2),
    );
    const brief = (await call('GET', '/v1/instances?details=false', undefined, u)).body.data.instances;
    // listed entries have no status, like /list entries and the listing of all volumes
    assert.deepEqual(brief[1], { uuid: ids[1], name: brief[1].name, state: 'running' });
    bad(
      await call('GET', `/v1/instances?from=${ids[0]!.replace(/^./, ids[0]![0] === 'a' ? 'b' : 'a')}`, undefined, u),
      /from/,
    );
    bad(await call('GET', '/v1/instances?count=0', undefined, u), /count/);
  });
});

describe('start and stop', () => {
  test('start: previous_state, already running is a no-op', async () => {
    const c = await create({ image: 'nginx:latest' });
    const s = ok(await call('PUT', '/v1/instances/start', { uuid: c.uuid }));
    assert.deepEqual([s.uuid, s.name, s.state, s.previous_state], [c.uuid, c.name, 'starting', 'stopped']);
    await waitFor(c.uuid, 'running');
    const again = ok(await call('PUT', `/v1/instances/${c.uuid}/start`));
    assert.deepEqual([again.state, again.previous_state], ['running', 'running']);
    assert.equal((await get(c.uuid)).start_count, 1);
    const c2 = await create({ image: 'nginx:latest' });
    const w = ok(await call('PUT', '/v1/instances/start', { uuid: c2.uuid, wait_timeout_ms: 5000 }));
    assert.equal(w.state, 'running');
    const c3 = await create({ image: 'nginx:latest' });
    assert.equal(ok(await call('PUT', '/v1/instances/start', [{ uuid: c3.uuid, timeout_s: 5 }])).state, 'running');
  });

  test('stop: graceful 15, force 28, drain, already stopped', async () => {
    const a = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: 5000 });
    const s = ok(await call('PUT', '/v1/instances/stop', { uuid: a.uuid }));
    assert.deepEqual([s.state, s.previous_state], ['stopping', 'running']);
    await waitFor(a.uuid, 'stopped');
    const ga = await get(a.uuid);
    assert.deepEqual([ga.stop_reason, ga.exit_code, ga.stop_code], [15, 0, 0]);

    const b = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: 5000 });
    ok(await call('PUT', '/v1/instances/stop', { uuid: b.uuid, force: true }));
    await waitFor(b.uuid, 'stopped');
    const gb = await get(b.uuid);
    assert.equal(gb.stop_reason, 28);
    assert.ok(!('exit_code' in gb) && !('stop_code' in gb));

    const c = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: 5000 });
    const d = ok(await call('PUT', '/v1/instances/stop', { uuid: c.uuid, drain_timeout_ms: 60000 }));
    assert.deepEqual([d.state, d.previous_state], ['draining', 'running']);
    await waitFor(c.uuid, 'stopped');

    const again = ok(await call('PUT', '/v1/instances/stop', { uuid: a.uuid, force: true }));
    assert.deepEqual([again.state, again.previous_state], ['stopped', 'stopped']);
    assert.equal((await get(a.uuid)).stop_reason, 15);
    bad(await call('PUT', '/v1/instances/stop', { uuid: a.uuid, drain_timeout_ms: -5 }), /drain_timeout_ms/);
  });
});

describe('wait', () => {
  let a: Any;
  let b: Any;
  before(async () => {
    a = await create({ image: 'nginx:latest', autostart: true, wait_timeout_ms: 5000 });
    b = await create({ image: 'nginx:latest' });
  });

  test('single target, ids, state; both is 400', async () => {
    assert.equal(ok(await call('GET', '/v1/instances/wait', { uuid: a.uuid })).state, 'running');
    assert.equal(ok(await call('GET', `/v1/instances/${b.uuid}/wait`, { state: 'stopped' })).state, 'stopped');
    const r = await call('GET', '/v1/instances/wait', {
      ids: [{ uuid: b.uuid }, { name: a.name }],
      state: 'stopped',
      timeout_ms: 200,
    });
    const p = call('GET', '/v1/instances/wait', {
      ids: [{ uuid: a.uuid }, { name: b.name }],
      state: 'stopped',
      timeout_ms: 5000,
    });
    ok(await call('PUT', '/v1/instances/stop', { uuid: a.uuid }));
    assert.equal(r.body.status, 'partial_success'); // a was still running then
    assert.deepEqual(
      r.body.data.instances.map((e: Any) => e.uuid ?? e.name),
      [b.uuid, a.name],
    );
    assert.equal(r.body.data.instances[1].error, 12);
    const both = await p;
    assert.equal(both.body.status, 'success', both.text);
    assert.deepEqual(
      both.body.data.instances.map((e: Any) => e.state),
      ['stopped', 'stopped'],
    );
    bad(await call('GET', '/v1/instances/wait', { uuid: a.uuid, ids: [{ uuid: b.uuid }] }), /not both/);
    bad(await call('GET', '/v1/instances/wait', { state: 'stopped' }), /required/);
    bad(await call('GET', '/v1/instances/wait', { uuid: a.uuid, state: 'gone' }), /state/);
  });

  test('timeout_ms and its alias timeout_s give a per-entry TimedOut', async () => {
    entryError(
      await call('GET', '/v1/instances/wait', { uuid: b.uuid, state: 'running', timeout_ms: 100 }),
      12,
      /running/,
    );
    entryError(await call('GET', `/v1/instances/wait?timeout_s=1&uuid=${b.uuid}`), 12);
    entryError(await call('GET', '/v1/instances/wait', { name: 'nobody-here' }), 8);
    // array body (Python SDK): each entry with its own state
    const r = await call('GET', '/v1/instances/wait', [
      { uuid: b.uuid, state: 'stopped', timeout_ms: 1000 },
      { uuid: b.uuid, state: 'running', timeout_ms: 100 },
    ]);
    assert.deepEqual(
      r.body.data.instances.map((e: Any) => e.status),
      ['success', 'error'],
    );
  });
});

describe('log', () => {
  const logOf = (id: string) => new ConsoleLog(join(h.dataDir, 'instances', id));
  const read = async (id: string, p: Record<string, unknown> = {}) => {
    const e = ok(await call('GET', '/v1/instances/log', { uuid: id, ...p }));
    return { ...e, text: Buffer.from(e.output, 'base64').toString() };
  };
  const content = Array.from({ length: 10000 }, (_, i) => String.fromCharCode(97 + (i % 26))).join('');

  test('no log yet: empty output and empty ranges', async () => {
    const c = await create({ image: 'nginx:latest' });
    const r = await read(c.uuid);
    assert.equal(r.output, '');
    assert.deepEqual(r.available, { start: 0, end: -1 });
    assert.deepEqual(r.range, { start: 0, end: -1 });
  });

  test('offset, negative offset, limit and ranges', async () => {
    const c = await create({ image: 'nginx:latest' });
    logOf(c.uuid).append(Buffer.from(content));
    const d = await read(c.uuid);
    assert.equal(d.text, content.slice(-4096));
    assert.deepEqual(d.available, { start: 0, end: 9999 });
    assert.deepEqual(d.range, { start: 10000 - 4096, end: 9999 });
    const head = await read(c.uuid, { offset: 0, limit: 10 });
    assert.equal(head.text, content.slice(0, 10));
    assert.deepEqual(head.range, { start: 0, end: 9 });
    const tail = await read(c.uuid, { offset: -5 });
    assert.equal(tail.text, content.slice(-5));
    assert.deepEqual(tail.range, { start: 9995, end: 9999 });
    const mid = await read(c.uuid, { offset: 26, limit: 3 });
    assert.equal(mid.text, 'abc');
    const past = await read(c.uuid, { offset: 20000 });
    assert.deepEqual([past.text, past.range], ['', { start: 10000, end: 9999 }]);
    const before = await read(c.uuid, { offset: -50000, limit: 4 });
    assert.deepEqual([before.text, before.range], ['abcd', { start: 0, end: 3 }]);
    assert.equal((await read(c.uuid, { limit: 0 })).text, '');
    bad(await call('GET', '/v1/instances/log', { uuid: c.uuid, limit: -1 }), /limit/);
    const q = ok(await call('GET', `/v1/instances/${c.uuid}/log?offset=0&limit=3`));
    assert.equal(Buffer.from(q.output, 'base64').toString(), 'abc');
  });

  test('a limit larger than the cap returns at most the cap', async () => {
    const c = await create({ image: 'nginx:latest' });
    logOf(c.uuid).append(Buffer.from(content + content));
    const r = await read(c.uuid, { offset: 0, limit: 20000 });
    assert.equal(r.text.length, 16383);
    assert.deepEqual(r.range, { start: 0, end: 16382 });
  });

  test('after a trim, offsets stay absolute', async () => {
    const c = await create({ image: 'nginx:latest' });
    new ConsoleLog(join(h.dataDir, 'instances', c.uuid), 1000).append(Buffer.from(content.slice(0, 1500)));
    const r = await read(c.uuid, { offset: 0, limit: 10 });
    assert.equal(r.available.end, 1499);
    assert.ok(r.available.start > 0);
    assert.equal(r.range.start, r.available.start);
    assert.equal(r.text, content.slice(r.available.start, r.available.start + 10));
  });
});

describe('quotas', () => {
  test('instances, live_instances and live_memory_mb', async () => {
    const q = await h.user('quota');
    await h.daemon.services.users.setQuotas('quota', {
      hard: { instances: 4, live_instances: 2, live_memory_mb: 256 },
    });
    const mk = (body: Record<string, unknown>) => call('POST', '/v1/instances', { image: 'nginx:latest', ...body }, q);
    const s1 = ok(await mk({ name: 's1' }));
    ok(await mk({ name: 'r1', autostart: true, memory_mb: 200 }));
    entryError(await mk({ name: 'r2', autostart: true, memory_mb: 100 }), 19, /live_memory_mb/);
    ok(await mk({ name: 'r3', autostart: true, memory_mb: 56 })); // exactly at the limit
    entryError(await mk({ name: 'r4', autostart: true, memory_mb: 16 }), 19, /live_instances/);
    entryError(await call('PUT', '/v1/instances/start', { uuid: s1.uuid }, q), 19);
    entryError(await mk({ name: 'many', replicas: 1 }), 19, /instances/);
    ok(await mk({ name: 's2' })); // stopped ones do not count as live
    entryError(await mk({ name: 's3' }), 19, /'instances'/);
    const used = (await call('GET', '/v1/users/quotas', undefined, q)).body.data.quotas[0].used;
    assert.deepEqual([used.instances, used.live_instances, used.live_memory_mb], [4, 2, 256]);
    ok(await call('PUT', '/v1/instances/stop', { name: 'r1' }, q));
    await waitFor((await call('GET', '/v1/instances', { name: 'r1' }, q)).body.data.instances[0].uuid, 'stopped', q);
    assert.equal(
      ok(await call('PUT', '/v1/instances/start', { uuid: s1.uuid, wait_timeout_ms: 5000 }, q)).state,
      'running',
    );
  });
});
