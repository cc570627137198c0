/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { startHarness, type Harness, type Reply } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

let h: Harness;
let alice: string;

const { ok, entryError, bad } = replyAsserts('volumes');

const getVol = async (token: string, uuid: string) => ok(await h.call('GET', '/v1/volumes', token, { uuid }))[0];

/** Polls until the volume reaches `state` (the simulated controller acts right after each commit). */
async function untilState(token: string, uuid: string, state: string): Promise<any> {
  for (let i = 0; i < 200; i++) {
    const v = await getVol(token, uuid);
    if (v.state === state) return v;
    await sleep(10);
  }
  assert.fail(`volume ${uuid} never reached ${state}`);
}

async function newVolume(token: string, body: object = {}): Promise<any> {
  const [v] = ok(await h.call('POST', '/v1/volumes', token, { size_mb: 16, ...body }));
  await untilState(token, v.uuid, 'available');
  return v;
}

async function newInstance(token: string, body: object = {}): Promise<any> {
  return ok(await h.call('POST', '/v1/instances', token, { image: 'app:latest', ...body }), 'instances')[0];
}

const attach = (token: string, vol: string, body: object) => h.call('PUT', `/v1/volumes/${vol}/attach`, token, body);

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  alice = await h.user('alice');
  await h.image('app:latest');
});
after(async () => h.close());

describe('create', () => {
  test('default name vol-xxxxx; initializing, then available', async () => {
    const [v] = ok(await h.call('POST', '/v1/volumes', alice, { size_mb: 32 }));
    assert.match(v.name, /^vol-[a-z0-9]{5}$/);
    assert.match(v.uuid, /^[0-9a-f-]{36}$/);
    const first = await getVol(alice, v.uuid);
    assert.ok(['initializing', 'available'].includes(first.state), first.state);
    const got = await untilState(alice, v.uuid, 'available');
    assert.equal(got.size_mb, 32);
    assert.equal(got.persistent, true);
    assert.deepEqual(got.attached_to, []);
    assert.ok(!Number.isNaN(Date.parse(got.created_at)));
  });

  test('a batch creates each volume; names are taken per user', async () => {
    const vs = ok(
      await h.call('POST', '/v1/volumes', alice, [
        { name: 'data-a', size_mb: 8 },
        { name: 'Data-B', size_mb: 8 },
      ]),
    );
    assert.deepEqual(
      vs.map((v) => v.name),
      ['data-a', 'data-b'],
    );
    entryError(await h.call('POST', '/v1/volumes', alice, { name: 'data-a', size_mb: 8 }), 23, /already exists/);
    ok(await h.call('POST', '/v1/volumes', await h.user('bob'), { name: 'data-a', size_mb: 8 }));
  });

  test('size must lie within the account limits', async () => {
    const { max_volume_mb } = h.daemon.config.defaultQuotas.limits;
    entryError(
      await h.call('POST', '/v1/volumes', alice, { size_mb: max_volume_mb + 1 }),
      7,
      /outside the account limits/,
    );
    bad(await h.call('POST', '/v1/volumes', alice, { size_mb: 0 }), /size_mb/);
    bad(await h.call('POST', '/v1/volumes', alice, { name: 'no-size' }), /size_mb/);
    bad(await h.call('POST', '/v1/volumes', alice, { size_mb: 8, name: 'bad_name' }), /name/);
  });
});

describe('get and list', () => {
  let carol: string;
  let a: any;
  let b: any;
  let inst: any;
  before(async () => {
    carol = await h.user('carol');
    a = await newVolume(carol, { name: 'ga' });
    b = await newVolume(carol, { name: 'gb' });
    inst = await newInstance(carol, { name: 'holder' });
    ok(await attach(carol, b.uuid, { attach_to: { name: 'holder' }, at: '/data' }));
  });

  test('body selectors: one object, an array, uuid or name', async () => {
    const [byName] = ok(await h.call('GET', '/v1/volumes', carol, { name: 'gb' }));
    assert.deepEqual(
      Object.keys(byName).sort(),
      [
        'attached_to',
        'created_at',
        'filesystem',
        'name',
        'persistent',
        'quota_policy',
        'size_mb',
        'state',
        'status',
        'uuid',
      ].sort(),
    );
    assert.equal(byName.status, 'success');
    assert.deepEqual(byName.attached_to, [{ uuid: inst.uuid }]);
    assert.equal(byName.state, 'idle');
    const both = ok(await h.call('GET', '/v1/volumes', carol, [{ uuid: b.uuid }, { name: 'ga' }]));
    assert.deepEqual(
      both.map((v) => v.name),
      ['gb', 'ga'],
    );
    assert.deepEqual(ok(await h.call('GET', `/v1/volumes/${a.uuid}`, carol))[0].name, 'ga');
  });

  test('query `name` and `uuid` take comma-separated lists', async () => {
    assert.deepEqual(
      ok(await h.call('GET', '/v1/volumes?name=ga,gb', carol)).map((v) => v.uuid),
      [a.uuid, b.uuid],
    );
    assert.deepEqual(
      ok(await h.call('GET', `/v1/volumes?uuid=${b.uuid},${a.uuid}`, carol)).map((v) => v.name),
      ['gb', 'ga'],
    );
    const r = await h.call('GET', '/v1/volumes?name=ga,nope', carol);
    assert.equal(r.body.status, 'partial_success');
    assert.equal(r.body.data.volumes[1].error, 8);
  });

  test('details=false returns uuid, name and state only', async () => {
    const [v] = ok(await h.call('GET', '/v1/volumes?details=false', carol, { name: 'gb' }));
    assert.deepEqual(v, { status: 'success', uuid: b.uuid, name: 'gb', state: 'idle' });
  });

  test('no selection returns all volumes, without status and attached_to', async () => {
    const all = ok(await h.call('GET', '/v1/volumes', carol));
    assert.deepEqual(
      all.map((v) => v.name),
      ['ga', 'gb'],
    );
    for (const v of all) {
      assert.equal(v.status, undefined);
      assert.equal(v.attached_to, undefined);
      assert.equal(v.size_mb, 16);
      assert.equal(typeof v.persistent, 'boolean');
    }
  });

  test("another user's volume is not found", async () => {
    entryError(await h.call('GET', '/v1/volumes', alice, { uuid: a.uuid }), 8, /No volume with UUID/);
  });

  test('list filters by persistent and state; all filters must match', async () => {
    const withInst = await newInstance(carol, { volumes: [{ size_mb: 4, at: '/scratch' }] });
    const [auto] = ok(await h.call('GET', '/v1/instances', carol, { uuid: withInst.uuid }), 'instances')[0]
      .volumes as any[];
    const names = (r: Reply) =>
      ok(r)
        .map((v) => v.name)
        .sort();
    assert.deepEqual(names(await h.call('GET', '/v1/volumes/list', carol)), [auto.name, 'ga', 'gb'].sort());
    assert.deepEqual(ok(await h.call('GET', '/v1/volumes/list', carol))[0], { uuid: a.uuid, name: 'ga' });
    assert.deepEqual(names(await h.call('GET', '/v1/volumes/list', carol, { persistent: false })), [auto.name]);
    assert.deepEqual(names(await h.call('GET', '/v1/volumes/list', carol, { persistent: true })), ['ga', 'gb']);
    assert.deepEqual(names(await h.call('GET', '/v1/volumes/list', carol, { state: 'available' })), ['ga']);
    assert.deepEqual(names(await h.call('GET', '/v1/volumes/list?state=idle&persistent=true', carol)), ['gb']);
    bad(await h.call('GET', '/v1/volumes/list', carol, { state: 'broken' }), /state/);
  });
});

describe('attach, detach, delete', () => {
  test('attach to a stopped instance; the instance shows the volume, readonly as given', async () => {
    const v = await newVolume(alice);
    const i = await newInstance(alice);
    const [r] = ok(await attach(alice, v.uuid, { attach_to: { uuid: i.uuid }, at: '/mnt/data', readonly: true }));
    assert.deepEqual(r, { status: 'success', uuid: v.uuid, name: v.name });
    const [iv] = ok(await h.call('GET', '/v1/instances', alice, { uuid: i.uuid }), 'instances');
    assert.deepEqual(iv.volumes, [{ uuid: v.uuid, name: v.name, at: '/mnt/data', readonly: true }]);
    const got = await getVol(alice, v.uuid);
    assert.deepEqual(got.attached_to, [{ uuid: i.uuid }]);
    assert.notEqual(got.state, 'available');
  });

  test('global scope attach by volume name and instance name', async () => {
    const v = await newVolume(alice, { name: 'named-vol' });
    await newInstance(alice, { name: 'named-inst' });
    ok(
      await h.call('PUT', '/v1/volumes/attach', alice, {
        name: 'named-vol',
        attach_to: { name: 'named-inst' },
        at: '/data',
      }),
    );
    assert.deepEqual((await getVol(alice, v.uuid)).attached_to.length, 1);
    entryError(
      await h.call('PUT', '/v1/volumes/attach', alice, {
        name: 'named-vol',
        attach_to: { name: 'ghost' },
        at: '/data',
      }),
      8,
      /ghost/,
    );
  });

  test('mount path rules answer 400 and attach nothing', async () => {
    const v = await newVolume(alice);
    const i = await newInstance(alice);
    const cases: [string, RegExp][] = [
      ['data', /must be absolute/],
      ['/data/./x', /'\.' or '\.\.' components/],
      ['/data/../etc', /'\.' or '\.\.' components/],
      ['/..', /'\.' or '\.\.' components/],
      ['/data:ro', /colons/],
      ['/', /must not be '\/'/],
    ];
    for (const [at, re] of cases) bad(await attach(alice, v.uuid, { attach_to: { uuid: i.uuid }, at }), re);
    bad(await attach(alice, v.uuid, { attach_to: { uuid: i.uuid } }), /at/);
    bad(await attach(alice, v.uuid, { at: '/data' }), /attach_to/);
    bad(await attach(alice, v.uuid, { attach_to: { uuid: i.uuid, name: 'x' }, at: '/data' }), /not both|either/);
    assert.deepEqual((await getVol(alice, v.uuid)).attached_to, []);
  });

  test('the volume must be available', async () => {
    const v = await newVolume(alice);
    const i = await newInstance(alice);
    await h.daemon.store.tx((tx) => tx.volumes.update(v.uuid, { state: 'busy' }));
    entryError(await attach(alice, v.uuid, { attach_to: { uuid: i.uuid }, at: '/data' }), 11, /busy, not available/);
  });

  test('a volume still being made can be attached, and named in a create', async () => {
    // no controller makes volumes here: they stay `initializing`, as on a host whose agent is still formatting
    // (the boot waits for it; test/api/hosts.test.ts has a volume made by another host's agent)
    const slow = await startHarness({}, (s) => [simMachines(s, { volumes: false })]);
    try {
      const bob = await slow.user('bob');
      await slow.image('app:latest');
      const made = async (name: string) => {
        const r = await slow.call('POST', '/v1/volumes', bob, { name, size_mb: 16 });
        const [v] = ok(r);
        assert.equal(v.state, 'initializing', r.text);
        return v;
      };
      const v1 = await made('one');
      const [i1] = ok(await slow.call('POST', '/v1/instances', bob, { image: 'app:latest' }), 'instances');
      ok(await slow.call('PUT', `/v1/volumes/${v1.uuid}/attach`, bob, { attach_to: { uuid: i1.uuid }, at: '/data' }));
      const v2 = await made('two');
      const [i2] = ok(
        await slow.call('POST', '/v1/instances', bob, { image: 'app:latest', volumes: [{ uuid: v2.uuid, at: '/d' }] }),
        'instances',
      );
      for (const [v, i] of [
        [v1, i1],
        [v2, i2],
      ]) {
        const got = ok(await slow.call('GET', '/v1/volumes', bob, { uuid: v.uuid }))[0];
        assert.deepEqual([got.state, got.attached_to], ['initializing', [{ uuid: i.uuid }]]);
      }
    } finally {
      await slow.close();
    }
  });

  test('the instance must be stopped', async () => {
    const v = await newVolume(alice);
    const i = await newInstance(alice, { autostart: true, wait_timeout_ms: 10000 });
    assert.equal(i.state, 'running');
    entryError(
      await attach(alice, v.uuid, { attach_to: { uuid: i.uuid }, at: '/data' }),
      11,
      /only to stopped instances/,
    );
  });

  test('an instance has at most one volume, a volume at most one instance', async () => {
    const v1 = await newVolume(alice);
    const v2 = await newVolume(alice);
    const i1 = await newInstance(alice);
    const i2 = await newInstance(alice);
    ok(await attach(alice, v1.uuid, { attach_to: { uuid: i1.uuid }, at: '/data' }));
    entryError(await attach(alice, v2.uuid, { attach_to: { uuid: i1.uuid }, at: '/data' }), 15, /already has a volume/);
    const again = await attach(alice, v1.uuid, { attach_to: { uuid: i2.uuid }, at: '/data' });
    assert.equal(again.body.status, 'error', again.text);
    assert.ok([11, 15].includes(again.body.data.volumes[0].error), again.text);
    assert.deepEqual((await getVol(alice, v1.uuid)).attached_to, [{ uuid: i1.uuid }]);
  });

  test('delete is refused while attached (code 15); allowed after detach', async () => {
    const v = await newVolume(alice);
    const i = await newInstance(alice);
    ok(await attach(alice, v.uuid, { attach_to: { uuid: i.uuid }, at: '/data' }));
    entryError(await h.call('DELETE', '/v1/volumes', alice, { uuid: v.uuid }), 15, /still attached/);
    const [d] = ok(await h.call('PUT', `/v1/volumes/${v.uuid}/detach`, alice));
    assert.deepEqual(d, { status: 'success', uuid: v.uuid, name: v.name });
    assert.equal((await getVol(alice, v.uuid)).state, 'available');
    ok(await h.call('DELETE', `/v1/volumes/${v.uuid}`, alice));
    entryError(await h.call('GET', '/v1/volumes', alice, { uuid: v.uuid }), 8);
  });

  test('detach needs a stopped instance; a volume that is not attached answers code 21', async () => {
    const v = await newVolume(alice);
    entryError(await h.call('PUT', '/v1/volumes/detach', alice, { uuid: v.uuid }), 21, /not attached/);
    const i = await newInstance(alice);
    ok(await attach(alice, v.uuid, { attach_to: { uuid: i.uuid }, at: '/data' }));
    ok(await h.call('PUT', '/v1/instances/start', alice, { uuid: i.uuid, wait_timeout_ms: 10000 }), 'instances');
    entryError(await h.call('PUT', '/v1/volumes/detach', alice, { uuid: v.uuid }), 11, /not stopped/);
    ok(await h.call('PUT', '/v1/instances/stop', alice, { uuid: i.uuid }), 'instances');
    ok(
      await h.call('GET', '/v1/instances/wait', alice, { uuid: i.uuid, state: 'stopped', timeout_ms: 10000 }),
      'instances',
    );
    ok(await h.call('PUT', `/v1/volumes/detach?name=${v.name}`, alice));
    assert.deepEqual((await getVol(alice, v.uuid)).attached_to, []);
  });

  test('a volume created with an instance is not persistent until detached', async () => {
    const i = await newInstance(alice, { volumes: [{ size_mb: 8, at: '/data', readonly: false }] });
    const [iv] = ok(await h.call('GET', '/v1/instances', alice, { uuid: i.uuid }), 'instances');
    const vol = iv.volumes[0];
    assert.match(vol.name, /^vol-[a-z0-9]{5}$/);
    const before = await getVol(alice, vol.uuid);
    assert.equal(before.persistent, false);
    assert.deepEqual(before.attached_to, [{ uuid: i.uuid }]);
    ok(await h.call('PUT', '/v1/volumes/detach', alice, { uuid: vol.uuid }));
    const afterDetach = await untilState(alice, vol.uuid, 'available');
    assert.equal(afterDetach.persistent, true);
  });

  test('deleting an instance deletes its non-persistent volume and frees a persistent one', async () => {
    const i1 = await newInstance(alice, { volumes: [{ size_mb: 8, at: '/data' }] });
    const volId = ok(await h.call('GET', '/v1/instances', alice, { uuid: i1.uuid }), 'instances')[0].volumes[0].uuid;
    ok(await h.call('DELETE', '/v1/instances', alice, { uuid: i1.uuid }), 'instances');
    entryError(await h.call('GET', '/v1/volumes', alice, { uuid: volId }), 8);

    const v = await newVolume(alice);
    const i2 = await newInstance(alice, { volumes: [{ uuid: v.uuid, at: '/data' }] });
    assert.deepEqual((await getVol(alice, v.uuid)).attached_to, [{ uuid: i2.uuid }]);
    ok(await h.call('DELETE', '/v1/instances', alice, { uuid: i2.uuid }), 'instances');
    const freed = await getVol(alice, v.uuid);
    assert.deepEqual(freed.attached_to, []);
    assert.equal(freed.state, 'available');
  });
});

describe('quotas', () => {
  test('the volumes quota is enforced (code 19) and nothing is created', async () => {
    const dan = await h.user('dan');
    await h.daemon.services.users.setQuotas('dan', { hard: { volumes: 2 } });
    ok(await h.call('POST', '/v1/volumes', dan, [{ size_mb: 8 }, { size_mb: 8 }]));
    entryError(await h.call('POST', '/v1/volumes', dan, { size_mb: 8 }), 19, /quota 'volumes' exceeded/);
    const r = await h.call('POST', '/v1/instances', dan, {
      image: 'app:latest',
      volumes: [{ size_mb: 8, at: '/data' }],
    });
    assert.equal(r.body.data.instances[0].error, 19, r.text);
    assert.equal(ok(await h.call('GET', '/v1/volumes/list', dan)).length, 2);
    assert.equal(ok(await h.call('GET', '/v1/instances/list', dan), 'instances').length, 0);
  });

  test('the total_volume_mb quota is enforced (code 19)', async () => {
    const erin = await h.user('erin');
    await h.daemon.services.users.setQuotas('erin', { hard: { total_volume_mb: 100 } });
    ok(await h.call('POST', '/v1/volumes', erin, { size_mb: 60 }));
    entryError(await h.call('POST', '/v1/volumes', erin, { size_mb: 41 }), 19, /total_volume_mb/);
    ok(await h.call('POST', '/v1/volumes', erin, { size_mb: 40 }));
    const [q] = ok(await h.call('GET', '/v1/users/quotas', erin), 'quotas');
    assert.equal(q.used.total_volume_mb, 100);
    assert.equal(q.used.volumes, 2);
  });
});
