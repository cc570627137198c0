/**
 * Cross-user isolation: for every endpoint that takes a target, user B
 * addressing user A's object gets exactly the answer it gets for an object
 * that does not exist, and A's object is unchanged (api-v1.md,
 * Authentication rule 4; compat-notes.md "Decisions").
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startHarness, type Harness, type Reply } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import fc from 'fast-check';
import { ENDPOINTS } from '../../src/api/routes/index.js';
import type { EndpointDef } from '../../src/api/endpoint.js';
import { shortTimeouts, valid, type Known } from '../helpers/fuzz-arbitraries.js';

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any
let h: Harness;
let A: string;
let B: string;
/** A's objects per category, as `{uuid, name}` */
const objs: Record<string, { uuid: string; name: string }[]> = {};
let aUser: string;
const MISSING_UUID = randomUUID();
const MISSING_NAME = 'no-such-object';
const POLICY = 'cpu-up';

const data = (r: Reply): Any[] => Object.values(r.body.data as Record<string, Any[]>)[0]!;

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  A = await h.user('alice');
  B = await h.user('bob');
  await h.image('nginx:latest');
  await h.image('alice/secret:1.0');
  const call = (m: string, p: string, body?: unknown) => h.call(m, p, A, body);
  const g = data(
    await call('POST', '/v1/services', {
      name: 'a-group',
      services: [{ port: 443, handlers: ['tls', 'http'] }],
      domains: [{ name: 'shop.example.com.' }],
    }),
  )[0];
  const vol = data(await call('POST', '/v1/volumes', { name: 'a-vol', size_mb: 1 }))[0];
  const vol2 = data(await call('POST', '/v1/volumes', { name: 'a-vol2', size_mb: 1 }))[0];
  await h.until(async () => data(await call('GET', '/v1/volumes')).every((v) => v.state === 'available'));
  const a1 = data(
    await call('POST', '/v1/instances', {
      name: 'a-run',
      image: 'nginx:latest',
      service_group: { name: 'a-group' },
      autostart: true,
      wait_timeout_ms: 5000,
    }),
  )[0];
  const a2 = data(
    await call('POST', '/v1/instances', {
      name: 'a-stopped',
      image: 'alice/secret:1.0',
      volumes: [{ name: 'a-vol2', at: '/data' }],
    }),
  )[0];
  const as = await call('POST', '/v1/services/autoscale', {
    uuid: g.uuid,
    master: { uuid: a1.uuid },
    policies: [{ name: POLICY, type: 'step', steps: [{ lower_bound: 500, adjustment: 1 }] }],
  });
  assert.equal(as.body.status, 'success', as.text);
  const certs = data(await call('GET', '/v1/certificates/list'));
  assert.equal(certs.length, 1);
  objs.instances = [a1, a2];
  objs.services = [g];
  objs.volumes = [vol, vol2];
  objs.certificates = certs;
  aUser = data(await call('GET', '/v1/users/quotas'))[0].uuid;
  objs.users = [{ uuid: aUser, name: 'alice' }];
  // B owns objects too, so its lists are not trivially empty
  await h.call('POST', '/v1/instances', B, {
    name: 'b-inst',
    image: 'nginx:latest',
    service_group: { services: [{ port: 443, handlers: ['tls', 'http'] }] },
  });
  await h.call('POST', '/v1/volumes', B, { name: 'b-vol', size_mb: 1 });
});
after(async () => h.close());

/** B's own objects and usual values: generated parameters refer to these. */
async function bKnown(): Promise<Known> {
  const mine = [
    ...data(await h.call('GET', '/v1/instances/list', B)),
    ...data(await h.call('GET', '/v1/services/list', B)),
    ...data(await h.call('GET', '/v1/volumes/list', B)),
  ];
  return {
    uuids: mine.map((o) => o.uuid),
    names: mine.map((o) => o.name),
    strings: ['/x', 'nginx:latest', 'stopped', 'step', 'cpu', 'change'],
  };
}

/**
 * Parameters (besides the target) that make each endpoint's request valid,
 * generated from its schema: the first candidate (none, then fast-check
 * samples drawn with B's own objects as references) whose request for a
 * missing object fails on that object's lookup, so the matrix below compares
 * lookups, not parameter checks.
 */
async function paramsFor(def: EndpointDef, known: Known): Promise<Record<string, unknown>> {
  const samples = fc.sample(valid(def.params, known), { numRuns: 3000, seed: 14 }).map(shortTimeouts);
  const local = def.localPath ?? def.path;
  const url = local.includes(':uuid') ? local.replace(':uuid', MISSING_UUID).replace(':policy', POLICY) : def.path;
  for (const params of [{}, ...samples] as Record<string, unknown>[]) {
    if (def.path.includes(':policy') && 'policy' in params) continue;
    const body = url === def.path && def.target === 'required' ? { uuid: MISSING_UUID, ...params } : params;
    const r = await h.call(def.method, url, B, body);
    if (notFound(r) && r.text.includes(MISSING_UUID)) {
      if (process.env.UNIHOST_ISO_DEBUG) console.log(def.method, def.path, JSON.stringify(params));
      return params;
    }
  }
  return assert.fail(`${def.method} ${def.path}: no generated parameters reach the target's lookup`);
}

/** The answer for a missing object: 404, or per-entry NotFound (8) in a 200. */
function notFound(r: Reply): boolean {
  if (r.status === 404) return r.body?.errors?.[0]?.error === 8;
  return r.status === 200 && r.body?.status === 'error' && data(r).every((e) => e.status === 'error' && e.error === 8);
}

/** The shape of an answer with the addressed identifier blanked out. */
function shape(r: Reply, ids: string[]): unknown {
  const blank = (s: string) => ids.reduce((acc, id) => acc.split(id).join('<ID>'), s);
  const b = r.body;
  return {
    http: r.status,
    status: b?.status,
    keys: Object.keys(b ?? {}).sort(),
    message: typeof b?.message === 'string' ? blank(b.message) : b?.message,
    errors: b?.errors,
    entries: b?.data
      ? Object.entries(b.data as Record<string, Any[]>).map(([k, es]) => [
          k,
          es.map((e) =>
            Object.fromEntries(Object.entries(e).map(([f, v]) => [f, typeof v === 'string' ? blank(v) : v])),
          ),
        ])
      : undefined,
  };
}

/** Sends B's request for A's object and for a missing one; both must look the same and fail with NotFound. */
async function same(
  label: string,
  mine: () => Promise<Reply>,
  missing: () => Promise<Reply>,
  ids: string[],
): Promise<void> {
  const x = await mine();
  const y = await missing();
  assert.deepEqual(shape(x, ids), shape(y, ids), `${label}\n A's: ${x.text}\n missing: ${y.text}`);
  assert.ok(notFound(y), `${label}: a missing object must answer NotFound: ${y.text}`);
  // nothing of A's objects but the identifier B gave may appear (in JSON or in a message)
  for (const secret of Object.values(objs)
    .flat()
    .flatMap((o) => [o.uuid, o.name])) {
    if (ids.includes(secret)) continue;
    assert.ok(
      !x.text.includes(`"${secret}"`) && !x.text.includes(`'${secret}'`),
      `${label} leaks ${secret}: ${x.text}`,
    );
  }
  if (x.status === 200) {
    const entries = data(x);
    assert.ok(entries.length > 0 && entries.every((e) => e.status === 'error' && e.error === 8), `${label}: ${x.text}`);
    assert.equal(x.body.status, 'error', label);
  }
}

/** Everything A can see of its objects (uptime moves on by itself, so it is left out). */
async function snapshot(): Promise<unknown> {
  const get = async (m: string, p: string, body?: unknown) => {
    const r = await h.call(m, p, A, body);
    assert.ok(r.body.data, `${p}: ${r.text}`);
    return data(r).map(({ uptime_ms: _u, ...rest }) => rest);
  };
  const out: unknown[] = [];
  for (const i of objs.instances!) out.push(await get('GET', '/v1/instances', { uuid: i.uuid }));
  for (const v of objs.volumes!) out.push(await get('GET', '/v1/volumes', { uuid: v.uuid }));
  for (const c of objs.certificates!) out.push(await get('GET', '/v1/certificates', { uuid: c.uuid }));
  const g = objs.services![0]!.uuid;
  out.push(await get('GET', '/v1/services', { uuid: g }), await get('GET', '/v1/services/autoscale', { uuid: g }));
  out.push(await get('GET', `/v1/services/${g}/autoscale/policies`), await get('GET', '/v1/users/quotas'));
  for (const p of ['/v1/instances/list', '/v1/services/list', '/v1/volumes/list', '/v1/certificates/list'])
    out.push(await get('GET', p));
  return out;
}

describe('B addressing A objects', () => {
  let before: unknown;
  test('snapshot of A', async () => {
    before = await snapshot();
  });

  test('every targeted endpoint x scope answers as for a missing object', async () => {
    // a target in the body (uuid/name) or an object in the path (autoscale policies, quotas)
    // nodes are the platform's hosts, owned by no user: developer accounts only (test/api/sdk.test.ts)
    const targeted = ENDPOINTS.filter(
      (d) =>
        !d.path.startsWith('/v1/nodes') && (d.target === 'required' || `${d.path}${d.localPath}`.includes(':uuid')),
    );
    assert.ok(targeted.length >= 20);
    const known = await bKnown();
    let checks = 0;
    for (const d of targeted) {
      const def = d as EndpointDef;
      const key = `${def.method} ${def.path}`;
      const params = await paramsFor(def, known);
      const category = def.path.split('/')[2]!;
      for (const o of objs[category] ?? assert.fail(`no objects for ${category}`)) {
        const ids = [o.uuid, o.name, MISSING_UUID, MISSING_NAME];
        const send = (path: string, body: unknown) => h.call(def.method, path, B, body);
        for (const url of [def.path, def.localPath]) {
          if (!url) continue;
          const fill = (u: string) => url.replace(':uuid', u).replace(':policy', POLICY);
          if (url.includes(':uuid')) {
            await same(
              `${key} local`,
              () => send(fill(o.uuid), params),
              () => send(fill(MISSING_UUID), params),
              ids,
            );
            checks++;
            continue;
          }
          if (def.target !== 'required') continue;
          await same(
            `${key} uuid`,
            () => send(url, { uuid: o.uuid, ...params }),
            () => send(url, { uuid: MISSING_UUID, ...params }),
            ids,
          );
          await same(
            `${key} name`,
            () => send(url, { name: o.name, ...params }),
            () => send(url, { name: MISSING_NAME, ...params }),
            ids,
          );
          checks += 2;
          if (def.batch) {
            await same(
              `${key} batch`,
              () =>
                send(url, [
                  { uuid: o.uuid, ...params },
                  { name: o.name, ...params },
                ]),
              () =>
                send(url, [
                  { uuid: MISSING_UUID, ...params },
                  { name: MISSING_NAME, ...params },
                ]),
              ids,
            );
            checks++;
          }
          if (def.method === 'GET') {
            await same(
              `${key} query`,
              () => send(`${url}?uuid=${o.uuid}`, params),
              () => send(`${url}?uuid=${MISSING_UUID}`, params),
              ids,
            );
            checks++;
          }
        }
      }
    }
    assert.ok(checks > 60, `only ${checks} checks`);
    console.log(`isolation matrix: ${checks} checks over ${targeted.length} endpoints`);
  });

  test('references inside parameters answer as for missing objects', async () => {
    const [a1, a2] = objs.instances!;
    const g = objs.services![0]!;
    const [vol] = objs.volumes!;
    const cert = objs.certificates![0]!;
    const bGroup = data(await h.call('GET', '/v1/instances', B, { name: 'b-inst' }))[0].service_group.uuid;
    const post = (p: string, body: unknown) => () => h.call('POST', p, B, body);
    const inst = (extra: object) => ({ image: 'nginx:latest', ...extra });
    const cases: [string, () => Promise<Reply>, () => Promise<Reply>, string[]][] = [
      [
        'instance in group by uuid',
        post('/v1/instances', inst({ service_group: { uuid: g.uuid } })),
        post('/v1/instances', inst({ service_group: { uuid: MISSING_UUID } })),
        [g.uuid, MISSING_UUID],
      ],
      [
        'instance in group by name',
        post('/v1/instances', inst({ service_group: { name: g.name } })),
        post('/v1/instances', inst({ service_group: { name: MISSING_NAME } })),
        [g.name, MISSING_NAME],
      ],
      [
        'instance with volume',
        post('/v1/instances', inst({ volumes: [{ uuid: vol!.uuid, at: '/d' }] })),
        post('/v1/instances', inst({ volumes: [{ uuid: MISSING_UUID, at: '/d' }] })),
        [vol!.uuid, MISSING_UUID],
      ],
      [
        'instance with volume by name',
        post('/v1/instances', inst({ volumes: [{ name: vol!.name, at: '/d' }] })),
        post('/v1/instances', inst({ volumes: [{ name: MISSING_NAME, at: '/d' }] })),
        [vol!.name, MISSING_NAME],
      ],
      [
        'private image',
        post('/v1/instances', { image: 'alice/secret:1.0' }),
        post('/v1/instances', { image: 'alice/nothing:1.0' }),
        ['secret', 'nothing'],
      ],
      [
        'autoscale master',
        post(`/v1/services/${bGroup}/autoscale`, { master: { uuid: a1!.uuid } }),
        post(`/v1/services/${bGroup}/autoscale`, { master: { uuid: MISSING_UUID } }),
        [a1!.uuid, MISSING_UUID],
      ],
      [
        'group with certificate',
        post('/v1/services', {
          services: [{ port: 443, handlers: ['tls', 'http'] }],
          domains: [{ name: 'b.example.com.', certificate: { uuid: cert.uuid } }],
        }),
        post('/v1/services', {
          services: [{ port: 443, handlers: ['tls', 'http'] }],
          domains: [{ name: 'b.example.com.', certificate: { uuid: MISSING_UUID } }],
        }),
        [cert.uuid, MISSING_UUID],
      ],
      [
        'quotas of A',
        () => h.call('GET', `/v1/users/${aUser}/quotas`, B),
        () => h.call('GET', `/v1/users/${MISSING_UUID}/quotas`, B),
        [aUser, MISSING_UUID],
      ],
      [
        'wait with ids',
        () => h.call('GET', '/v1/instances/wait', B, { ids: [{ uuid: a2!.uuid }], state: 'stopped', timeout_ms: 100 }),
        () =>
          h.call('GET', '/v1/instances/wait', B, { ids: [{ uuid: MISSING_UUID }], state: 'stopped', timeout_ms: 100 }),
        [a2!.uuid, MISSING_UUID],
      ],
    ];
    await h.call('POST', '/v1/volumes', B, { name: 'b-vol-attach', size_mb: 1 });
    await h.until(
      async () => data(await h.call('GET', '/v1/volumes', B, { name: 'b-vol-attach' }))[0].state === 'available',
    );
    const attach = (to: string) => () =>
      h.call('PUT', '/v1/volumes/attach', B, { name: 'b-vol-attach', attach_to: { uuid: to }, at: '/x' });
    cases.push(['attach to A instance', attach(a2!.uuid), attach(MISSING_UUID), [a2!.uuid, MISSING_UUID]]);
    for (const [label, mine, missing, ids] of cases) await same(label, mine, missing, ids);
  });

  test("A's objects are unchanged", async () => {
    assert.deepEqual(await snapshot(), before);
  });
});

describe('lists and names', () => {
  test("B's lists never show A's objects", async () => {
    const aIds = Object.values(objs)
      .flat()
      .flatMap((o) => [o.uuid, o.name]);
    for (const p of [
      '/v1/instances/list',
      '/v1/instances',
      '/v1/services/list',
      '/v1/volumes/list',
      '/v1/volumes',
      '/v1/certificates/list',
      '/v1/images/list',
      '/v1/images',
    ]) {
      const r = await h.call('GET', p, B);
      assert.equal(r.status, 200, `${p}: ${r.text}`);
      for (const id of aIds) assert.ok(!r.text.includes(`"${id}"`), `${p} shows ${id}: ${r.text}`);
    }
    assert.ok(data(await h.call('GET', '/v1/instances/list', B)).some((i) => i.name === 'b-inst'));
    assert.ok(data(await h.call('GET', '/v1/volumes/list', B)).some((v) => v.name === 'b-vol'));
    const images = data(await h.call('GET', '/v1/images/list', B));
    assert.ok(images.every((i) => !i.tags.some((t: string) => t.startsWith('alice/'))));
    assert.ok(images.some((i) => i.tags.includes('nginx:latest')));
  });

  test('two users may use the same names', async () => {
    const C = await h.user('carol');
    const inst = data(
      await h.call('POST', '/v1/instances', C, {
        name: 'a-run',
        image: 'nginx:latest',
        service_group: { services: [{ port: 443, handlers: ['tls', 'http'] }] },
      }),
    )[0];
    assert.equal(inst.status, 'success', JSON.stringify(inst));
    assert.notEqual(inst.uuid, objs.instances![0]!.uuid);
    const g = data(
      await h.call('POST', '/v1/services', C, {
        name: 'a-group',
        services: [{ port: 443, handlers: ['tls', 'http'] }],
      }),
    )[0];
    assert.equal(g.status, 'success', JSON.stringify(g));
    const v = data(await h.call('POST', '/v1/volumes', C, { name: 'a-vol', size_mb: 1 }))[0];
    assert.equal(v.status, 'success', JSON.stringify(v));
    // each user's name resolves to its own object
    assert.equal(data(await h.call('GET', '/v1/instances', C, { name: 'a-run' }))[0].uuid, inst.uuid);
    assert.equal(data(await h.call('GET', '/v1/instances', A, { name: 'a-run' }))[0].uuid, objs.instances![0]!.uuid);
    // domains, though, are unique across users
    const taken = data(
      await h.call('POST', '/v1/services', C, {
        services: [{ port: 443, handlers: ['tls', 'http'] }],
        domains: [{ name: 'shop.example.com.' }],
      }),
    )[0];
    assert.equal(taken.status, 'error');
    assert.equal(taken.error, 24);
  });
});
