import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

// The list and get forms newer clients (the official JS SDK) send to every category:
// `GET /v1/<category>?count=N[&from=<last uuid>][&details=...]`, and gets with `details`.

let h: Harness;
let alice: string;
let bob: string;

const { ok, bad } = replyAsserts('instances');

/** Three objects of each category for alice, in creation order (uuids). */
const made: Record<string, string[]> = { service_groups: [], volumes: [], certificates: [] };

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  alice = await h.user('alice');
  bob = await h.user('bob');
  await h.image('app:latest');
  for (let i = 0; i < 3; i++) {
    const [g] = ok(
      await h.call('POST', '/v1/services', alice, {
        name: `g${i}`,
        services: [{ port: 443, handlers: ['http', 'tls'] }],
        domains: [{ name: `site${i}.example.com.` }],
      }),
      'service_groups',
    );
    made.service_groups!.push(g.uuid);
    made.certificates!.push(g.domains[0].certificate.uuid);
    const [v] = ok(await h.call('POST', '/v1/volumes', alice, { name: `v${i}`, size_mb: 4 }), 'volumes');
    made.volumes!.push(v.uuid);
  }
  // another user's objects never show up in alice's lists
  ok(await h.call('POST', '/v1/volumes', bob, { name: 'bobs', size_mb: 4 }), 'volumes');
});
after(async () => h.close());

const CATEGORIES = [
  ['services', 'service_groups'],
  ['volumes', 'volumes'],
  ['certificates', 'certificates'],
] as const;

describe('target-less GET lists every category', () => {
  for (const [path, plural] of CATEGORIES) {
    test(`${path}: all, pages by count/from, details=false`, async () => {
      const ids = made[plural]!;
      const all = ok(await h.call('GET', `/v1/${path}?count=100`, alice), plural);
      assert.deepEqual(
        all.map((o) => o.uuid),
        ids,
      );
      assert.ok(
        all.every((o) => o.status === undefined && typeof o.created_at === 'string'),
        'full details, no status',
      );
      const p1 = ok(await h.call('GET', `/v1/${path}?count=2`, alice), plural);
      assert.deepEqual(
        p1.map((o) => o.uuid),
        ids.slice(0, 2),
      );
      const p2 = ok(await h.call('GET', `/v1/${path}?count=2&from=${ids[1]}`, alice), plural);
      assert.deepEqual(
        p2.map((o) => o.uuid),
        ids.slice(2),
      );
      const empty = ok(await h.call('GET', `/v1/${path}?count=2&from=${ids[2]}`, alice), plural);
      assert.deepEqual(empty, []);
      const brief = ok(await h.call('GET', `/v1/${path}?details=false`, alice), plural);
      for (const o of brief) {
        assert.ok(o.created_at === undefined, JSON.stringify(o));
        assert.deepEqual(Object.keys(o).sort(), path === 'services' ? ['name', 'uuid'] : ['name', 'state', 'uuid']);
      }
      bad(await h.call('GET', `/v1/${path}?count=0`, alice), /count/);
      bad(
        await h.call(
          'GET',
          `/v1/${path}?from=${made.volumes![0] === ids[0] ? made.certificates![0] : made.volumes![0]}`,
          alice,
        ),
        /'from'.*no object/,
      );
      bad(await h.call('GET', `/v1/${path}?count=2&uuid=${ids[0]}`, alice), /cannot go with 'uuid' or 'name'/);
    });

    test(`${path}: get by uuid or name accepts details, in global and local scope`, async () => {
      const id = made[plural]![0]!;
      const [full] = ok(await h.call('GET', `/v1/${path}?uuid=${id}&details=true`, alice), plural);
      assert.equal(full.status, 'success');
      assert.equal(full.uuid, id);
      const [byName] = ok(await h.call('GET', `/v1/${path}?name=${full.name}&details=true`, alice), plural);
      assert.deepEqual(byName, full);
      const [local] = ok(await h.call('GET', `/v1/${path}/${id}?details=true`, alice), plural);
      assert.deepEqual(local, full);
      const [brief] = ok(await h.call('GET', `/v1/${path}/${id}?details=false`, alice), plural);
      assert.equal(brief.uuid, id);
      assert.equal(brief.created_at, undefined);
      bad(await h.call('GET', `/v1/${path}?uuid=${id}&details=maybe`, alice), /details/);
    });
  }

  test('another user lists only its own objects', async () => {
    const vs = ok(await h.call('GET', '/v1/volumes?count=100', bob), 'volumes');
    assert.deepEqual(
      vs.map((v) => v.name),
      ['bobs'],
    );
    assert.deepEqual(ok(await h.call('GET', '/v1/services?count=100', bob), 'service_groups'), []);
  });

  test('autoscale get accepts details', async () => {
    const r = await h.call('GET', `/v1/services/autoscale?uuid=${made.service_groups![0]}&details=true`, alice);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.data.service_groups[0].uuid, made.service_groups![0]);
  });

  test('GET /v1/images is the image list', async () => {
    const a = ok(await h.call('GET', '/v1/images', alice), 'images');
    const b = ok(await h.call('GET', '/v1/images/list', alice), 'images');
    assert.deepEqual(a, b);
    assert.ok(a.some((i) => i.tags.includes('app:latest')));
  });
});

describe('timeout_s', () => {
  test('create waits with timeout_s; both forms at once are a 400 naming both', async () => {
    const [i] = ok(
      await h.call('POST', '/v1/instances', alice, { image: 'app:latest', autostart: true, timeout_s: 5 }),
    );
    assert.equal(i.state, 'running');
    bad(
      await h.call('POST', '/v1/instances', alice, {
        image: 'app:latest',
        autostart: true,
        timeout_s: 5,
        wait_timeout_ms: 5000,
      }),
      /either 'wait_timeout_ms' or 'timeout_s', not both/,
    );
    const [s] = ok(await h.call('PUT', `/v1/instances/${i.uuid}/stop`, alice));
    assert.equal(s.uuid, i.uuid);
    ok(await h.call('GET', `/v1/instances/wait?uuid=${i.uuid}&state=stopped&timeout_s=5`, alice));
    const [st] = ok(await h.call('PUT', `/v1/instances/${i.uuid}/start`, alice, { timeout_s: 5 }));
    assert.equal(st.state, 'running');
    bad(await h.call('PUT', `/v1/instances/${i.uuid}/start`, alice, { timeout_s: 5, wait_timeout_ms: 1 }), /not both/);
    bad(await h.call('GET', `/v1/instances/wait?uuid=${i.uuid}&timeout_s=1&timeout_ms=1`, alice), /not both/);
  });
});

describe('unknown sub-paths', () => {
  test('a word where a UUID goes is No API endpoint; a malformed UUID stays a 400', async () => {
    for (const p of ['/v1/instances/everything', '/v1/volumes/attached', '/v1/services/nothing']) {
      const r = await h.call('GET', p, alice);
      assert.equal(r.status, 404, `${p}: ${r.text}`);
      assert.equal(r.body.message, 'No API endpoint');
    }
    bad(await h.call('GET', '/v1/instances/1234-abcd', alice), /not a valid UUID/);
  });
});
