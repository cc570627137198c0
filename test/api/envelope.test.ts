/**
 * The API framework over real HTTP: authentication, the envelope, body and
 * query parsing, scope rules, batches, name rules and the OpenAPI document
 * (api-v1.md "Request conventions" and "Errors"; compat-notes.md "Decisions").
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { startHarness, type Harness, type Reply } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { ENDPOINTS } from '../../src/api/routes/index.js';

let h: Harness;
let token: string;

before(async () => {
  h = await startHarness({ bodyLimit: 4096 }, (s) => [simMachines(s)]);
  token = await h.user('alice');
  await h.image('nginx:latest');
});
after(async () => h.close());

/** Asserts the whole-request error envelope and returns its message. */
function assertError(r: Reply, http: number, messageMatch?: RegExp): string {
  assert.equal(r.status, http, r.text);
  assert.equal(r.body.status, 'error');
  assert.equal(typeof r.body.message, 'string');
  assert.ok(Array.isArray(r.body.errors) && r.body.errors.length === 1, r.text);
  assert.equal(r.body.errors[0].status, http);
  assert.equal(typeof r.body.op_time_us, 'number');
  assert.equal(r.body.data, undefined);
  if (messageMatch) assert.match(r.body.message, messageMatch);
  return r.body.message as string;
}

const create = (body: unknown) => h.call('POST', '/v1/instances', token, body);
const listNames = async (): Promise<string[]> =>
  (await h.call('GET', '/v1/instances/list', token)).body.data.instances.map((i: { name: string }) => i.name);

describe('authentication', () => {
  test('no token, malformed, unknown, wrong secret all answer 401', async () => {
    const b64 = (s: string) => Buffer.from(s).toString('base64');
    const cases: [string, Record<string, string>][] = [
      ['none', {}],
      ['not bearer', { authorization: `Basic ${b64('alice:x')}` }],
      ['malformed', { authorization: 'Bearer !!!not-base64!!!' }],
      ['no colon', { authorization: `Bearer ${b64('alicesecret')}` }],
      ['unknown user', { authorization: `Bearer ${b64('nobody:secret')}` }],
      ['wrong secret', { authorization: `Bearer ${b64('alice:wrong-secret')}` }],
      [
        'token of alice, other user name',
        { authorization: `Bearer ${b64(`bob:${Buffer.from(token, 'base64').toString().split(':')[1]}`)}` },
      ],
    ];
    for (const [what, headers] of cases) {
      const r = await h.call('GET', '/v1/instances/list', null, undefined, headers);
      assertError(r, 401);
      assert.ok(r.body.errors[0].message, what);
    }
  });

  test('GET / without a token is 401 (liveness probe); with one 200', async () => {
    assertError(await h.call('GET', '/', null), 401);
    const ok = await h.call('GET', '/', token);
    assert.equal(ok.status, 200);
    assert.equal(ok.body.status, 'success');
  });

  test('401 comes before routing and validation', async () => {
    assertError(await h.call('GET', '/v1/nowhere', null), 401);
    assertError(await h.call('POST', '/v1/instances', null, '{broken'), 401);
  });
});

describe('envelope', () => {
  test('op_time_us on every response kind', async () => {
    await create({ image: 'nginx:latest', name: 'optime' });
    const replies = [
      await h.call('GET', '/v1/instances', token, { name: 'optime' }), // success
      await h.call('GET', '/v1/instances', token, [{ name: 'optime' }, { name: 'missing' }]), // partial
      await h.call('GET', '/v1/instances', token, { name: 'missing' }), // all failed
      await h.call('GET', '/v1/instances/list', token, { bogus: 1 }), // 400
      await h.call('GET', '/v1/instances/list', null), // 401
      await h.call('GET', '/v1/nowhere', token), // 404
      await h.call('POST', '/v1/instances', token, { image: 'x'.repeat(8000) }), // 413
      await h.call('GET', '/v1/healthz', token),
      await h.call('GET', '/', token),
    ];
    for (const r of replies) {
      assert.equal(typeof r.body?.op_time_us, 'number', r.text);
      assert.ok(Number.isInteger(r.body.op_time_us) && r.body.op_time_us >= 0, r.text);
    }
    assert.deepEqual(
      replies.map((r) => r.status),
      [200, 200, 200, 400, 401, 404, 413, 200, 200],
    );
  });

  test('success: data.<plural> with per-entry status, no message', async () => {
    const r = await h.call('GET', '/v1/instances', token, { name: 'optime' });
    assert.equal(r.body.status, 'success');
    assert.equal(r.body.message, undefined);
    assert.deepEqual(Object.keys(r.body.data), ['instances']);
    assert.equal(r.body.data.instances[0].status, 'success');
  });
});

describe('request parsing', () => {
  test('malformed JSON is 400 naming the problem', async () => {
    const msg = assertError(await h.call('POST', '/v1/instances', token, '{"image": '), 400, /JSON/);
    assert.match(msg, /malformed/i);
    // a GET body is parsed too
    assertError(await h.call('GET', '/v1/instances', token, '{name:x}'), 400, /JSON/);
  });

  test('a JSON body that is not an object or array is 400', async () => {
    assertError(await h.call('POST', '/v1/instances', token, '42'), 400, /object/);
    assertError(await h.call('POST', '/v1/instances', token, '"x"'), 400, /object/);
    assertError(await h.call('POST', '/v1/instances', token, '[]'), 400, /empty/);
    assertError(await h.call('POST', '/v1/instances', token, '[1]'), 400, /entry 0/);
  });

  test('unknown parameter is 400 naming it', async () => {
    assertError(await create({ image: 'nginx:latest', colour: 'red' }), 400, /colour/);
    assertError(await h.call('PUT', '/v1/instances/stop', token, { name: 'optime', hard: true }), 400, /'hard'/);
    assertError(await h.call('GET', '/v1/instances/list?colour=red', token), 400, /colour/);
    // nested unknown parameter
    assertError(await create({ image: 'nginx:latest', volumes: [{ size_mb: 1, at: '/d', mode: 'rw' }] }), 400, /mode/);
  });

  test('ill-typed parameter is 400 naming it', async () => {
    assertError(await create({ image: 'nginx:latest', memory_mb: '128' }), 400, /memory_mb/);
    assertError(await create({ image: 'nginx:latest', autostart: 'yes' }), 400, /autostart/);
    assertError(await create({ image: 'nginx:latest', memory_mb: 1.5 }), 400, /memory_mb/);
    assertError(await create({ image: 42 }), 400, /image/);
    assertError(await create({}), 400, /image/);
    assertError(await create({ image: 'nginx:latest', env: { A: 1 } }), 400, /env/);
    assertError(await h.call('PUT', '/v1/instances/stop', token, { name: 'optime', force: 1 }), 400, /force/);
    assertError(await h.call('GET', '/v1/instances/list?state=sleeping', token), 400, /state/);
  });

  test('oversized body is 413', async () => {
    const r = await create({ image: 'nginx:latest', args: ['x'.repeat(5000)] });
    assertError(r, 413, /too large/);
    assert.ok(!(await listNames()).some((n) => n.startsWith('nginx-')));
  });

  test('wrong method on an existing path and an unknown path are 404 No API endpoint', async () => {
    for (const [m, p] of [
      ['POST', '/v1/instances/list'],
      ['PATCH', '/v1/instances/start'],
      ['GET', '/v1/instances/start'],
      ['DELETE', '/v1/instances/list'],
      ['GET', '/v1/nothing'],
      ['GET', '/v3/instances'], // /v2/ is the OCI registry's (docs/registry.md)
      ['GET', '/v1/instances/a/b/c/d'],
    ]) {
      const r = await h.call(m!, p!, token);
      assertError(r, 404);
      assert.equal(r.body.message, 'No API endpoint', `${m} ${p}`);
      assert.equal(r.body.errors[0].error, 3);
    }
  });
});

describe('scope and targets', () => {
  let a: string;
  let b: string;
  before(async () => {
    const r = await create([
      { image: 'nginx:latest', name: 'scope-a' },
      { image: 'nginx:latest', name: 'scope-b' },
    ]);
    [a, b] = r.body.data.instances.map((i: { uuid: string }) => i.uuid);
  });

  test('global scope with a single object and with a batch array', async () => {
    const one = await h.call('PUT', '/v1/instances/start', token, { uuid: a });
    assert.equal(one.body.status, 'success');
    assert.equal(one.body.data.instances.length, 1);
    const many = await h.call('PUT', '/v1/instances/stop', token, [{ uuid: a }, { name: 'scope-b' }]);
    assert.equal(many.body.status, 'success');
    assert.deepEqual(
      many.body.data.instances.map((i: { uuid: string }) => i.uuid),
      [a, b],
    );
  });

  test('local scope takes the object from the path and rejects uuid/name in the body', async () => {
    const r = await h.call('GET', `/v1/instances/${a}`, token);
    assert.equal(r.body.data.instances[0].uuid, a);
    const empty = await h.call('PUT', `/v1/instances/${a}/stop`, token);
    assert.equal(empty.status, 200, empty.text);
    assertError(await h.call('PUT', `/v1/instances/${a}/stop`, token, { uuid: a }), 400, /local scope/);
    assertError(await h.call('PUT', `/v1/instances/${a}/stop`, token, { name: 'scope-a' }), 400, /local scope/);
    assertError(await h.call('PUT', `/v1/instances/${a}/stop?name=scope-a`, token), 400, /local scope/);
    assertError(await h.call('PUT', `/v1/instances/${a}/stop`, token, [{ force: true }]), 400, /array/);
    // other parameters are fine in local scope
    const forced = await h.call('PUT', `/v1/instances/${a}/stop`, token, { force: true });
    assert.equal(forced.status, 200, forced.text);
  });

  test('invalid UUID in the path is 400', async () => {
    assertError(await h.call('PUT', '/v1/instances/not-a-uuid/stop', token), 400, /not-a-uuid.*UUID|UUID.*not-a-uuid/);
    assertError(await h.call('GET', '/v1/instances/1234', token), 400, /UUID/);
  });

  test('both uuid and name is 400, neither is 400', async () => {
    const both = assertError(await h.call('PUT', '/v1/instances/stop', token, { uuid: a, name: 'scope-a' }), 400);
    assert.match(both, /not both/);
    assert.equal(
      (await h.call('PUT', '/v1/instances/stop', token, { uuid: a, name: 'scope-a' })).body.errors[0].error,
      17,
    );
    const neither = await h.call('PUT', '/v1/instances/stop', token, {});
    assertError(neither, 400, /'uuid' or 'name' is required/);
    assert.equal(neither.body.errors[0].error, 13);
    assertError(await h.call('DELETE', '/v1/instances', token), 400, /required/);
    // in a batch, the bad entry is named
    assertError(await h.call('PUT', '/v1/instances/stop', token, [{ uuid: a }, {}]), 400, /entry 1/);
    assertError(await h.call('GET', '/v1/instances', token, [{ uuid: a }, {}]), 400, /entry 1/);
    assertError(await h.call('PUT', '/v1/instances/stop', token, { uuid: 'nope' }), 400, /uuid/);
  });

  test('partial success: one existing and one missing target', async () => {
    const missing = randomUUID();
    const r = await h.call('GET', '/v1/instances', token, [{ uuid: a }, { uuid: missing }]);
    assert.equal(r.status, 200);
    assert.equal(r.body.status, 'partial_success');
    assert.equal(typeof r.body.message, 'string');
    const [ok, bad] = r.body.data.instances;
    assert.equal(ok.status, 'success');
    assert.equal(bad.status, 'error');
    assert.equal(bad.uuid, missing);
    assert.match(bad.message, new RegExp(missing));
    assert.match(bad.message, /instance/i);
    assert.equal(bad.error, 8);
    const byName = await h.call('PUT', '/v1/instances/start', token, [{ name: 'ghost' }, { uuid: a }]);
    assert.equal(byName.body.status, 'partial_success');
    assert.equal(byName.body.data.instances[0].name, 'ghost');
    assert.match(byName.body.data.instances[0].message, /No instance with name 'ghost'/);
    assert.equal(byName.body.data.instances[0].error, 8);
  });

  test('all failed: top-level status error, HTTP 200, entries kept', async () => {
    const r = await h.call('DELETE', '/v1/instances', token, [{ name: 'ghost1' }, { name: 'ghost2' }]);
    assert.equal(r.status, 200);
    assert.equal(r.body.status, 'error');
    assert.equal(typeof r.body.message, 'string');
    assert.equal(r.body.data.instances.length, 2);
    assert.ok(r.body.data.instances.every((e: { error: number }) => e.error === 8));
    const single = await h.call('GET', '/v1/instances', token, { name: 'ghost1' });
    assert.equal(single.body.status, 'error');
    assert.match(single.body.message, /ghost1/);
  });

  test('entries come in request order', async () => {
    const order = [{ name: 'ghost' }, { uuid: b }, { name: 'scope-a' }, { uuid: randomUUID() }, { uuid: a }];
    for (const [m, p] of [
      ['GET', '/v1/instances'],
      ['PUT', '/v1/instances/start'],
      ['PUT', '/v1/instances/stop'],
    ]) {
      const r = await h.call(m!, p!, token, order);
      const got = r.body.data.instances.map((e: { uuid?: string; name?: string; status: string }) => e.status);
      assert.deepEqual(got, ['error', 'success', 'success', 'error', 'success'], `${m} ${p}`);
      assert.equal(r.body.data.instances[0].name, 'ghost');
      assert.equal(r.body.data.instances[1].uuid, b);
      assert.equal(r.body.data.instances[2].uuid, a);
      assert.equal(r.body.data.instances[3].uuid, order[3]!.uuid);
    }
  });

  test('a bad entry aborts the whole batch with 400 and nothing is created', async () => {
    const before = await listNames();
    const r = await create([
      { image: 'nginx:latest', name: 'batch-ok' },
      { image: 'nginx:latest', name: 'batch_bad' },
    ]);
    assertError(r, 400, /entry 1/);
    const r2 = await create([
      { image: 'nginx:latest', name: 'batch-ok' },
      { image: 'nginx:latest', restart_policy: 'sometimes' },
    ]);
    assertError(r2, 400, /entry 1.*restart_policy/);
    const r3 = await create([
      { image: 'nginx:latest', name: 'batch-ok' },
      { image: 'nginx:latest', wait_timeout_ms: 100 },
    ]);
    assertError(r3, 400, /entry 1.*wait_timeout_ms/);
    assert.deepEqual(await listNames(), before);
  });
});

describe('names', () => {
  test('upper case is lower-cased on create and on lookup', async () => {
    const r = await create({ image: 'nginx:latest', name: 'MixedCase.Name' });
    assert.equal(r.body.data.instances[0].name, 'mixedcase.name');
    const g = await h.call('GET', '/v1/instances', token, { name: 'MIXEDCASE.NAME' });
    assert.equal(g.body.status, 'success');
    assert.equal(g.body.data.instances[0].name, 'mixedcase.name');
    const q = await h.call('GET', '/v1/instances?name=MixedCase.name', token);
    assert.equal(q.body.status, 'success', q.text);
  });

  test('each rule violation is 400 with a message saying why', async () => {
    const label64 = 'a'.repeat(64);
    const long = Array.from({ length: 5 }, () => 'b'.repeat(30)).join('.'); // 154 characters
    const cases: [string, RegExp][] = [
      [label64, /63/],
      [long, /121/],
      ['trailing.dot.', /end with a dot/],
      ['double--hyphen', /consecutive hyphens/],
      ['1leading-digit', /start with a letter/],
      ['under_score', /'_'/],
      ['double..dot', /consecutive dots/],
      ['ends-with-', /end with a letter or digit/],
      ['.leading', /start with a dot/],
      ['', /empty/],
    ];
    for (const [name, why] of cases) {
      const msg = assertError(await create({ image: 'nginx:latest', name }), 400);
      assert.match(msg, /parameter 'name'/, name);
      assert.match(msg, why, name);
    }
    // the limits themselves are fine
    const ok = await create({ image: 'nginx:latest', name: `${'c'.repeat(63)}.${'d'.repeat(57)}` });
    assert.equal(ok.body.status, 'success', ok.text);
    assert.equal(ok.body.data.instances[0].name.length, 121);
    // targets follow the same rules
    assertError(await h.call('GET', '/v1/instances', token, { name: 'bad_name' }), 400, /'_'/);
  });
});

describe('GET parameters from the query string', () => {
  let ids: string[];
  before(async () => {
    const r = await create([
      { image: 'nginx:latest', name: 'query-a' },
      { image: 'nginx:latest', name: 'query-b' },
    ]);
    ids = r.body.data.instances.map((i: { uuid: string }) => i.uuid);
  });

  test('repeated uuid keys and comma-separated names', async () => {
    const r = await h.call('GET', `/v1/instances?uuid=${ids[0]}&uuid=${ids[1]}`, token);
    assert.deepEqual(
      r.body.data.instances.map((i: { name: string }) => i.name),
      ['query-a', 'query-b'],
    );
    const n = await h.call('GET', '/v1/instances?name=query-b,query-a', token);
    assert.deepEqual(
      n.body.data.instances.map((i: { name: string }) => i.name),
      ['query-b', 'query-a'],
    );
    const mixed = await h.call('GET', `/v1/instances?uuid=${ids[0]}&details=true`, token);
    assert.equal(mixed.body.data.instances.length, 1);
    assert.equal(mixed.body.data.instances[0].image.startsWith('sha256:'), true);
  });

  test('booleans true/false and numbers', async () => {
    await h.call('POST', '/v1/volumes', token, { name: 'qvol', size_mb: 1 });
    const f = await h.call('GET', '/v1/volumes?details=false', token);
    assert.equal(f.status, 200, f.text);
    assert.equal(f.body.data.volumes[0].size_mb, undefined);
    const t = await h.call('GET', '/v1/volumes?details=true', token);
    assert.equal(t.body.data.volumes[0].size_mb, 1);
    assertError(await h.call('GET', '/v1/volumes?details=maybe', token), 400, /details/);
    const persistent = await h.call('GET', '/v1/volumes/list?persistent=true', token);
    assert.deepEqual(
      persistent.body.data.volumes.map((v: { name: string }) => v.name),
      ['qvol'],
    );
    assert.deepEqual((await h.call('GET', '/v1/volumes/list?persistent=false', token)).body.data.volumes, []);
    const page = await h.call('GET', '/v1/instances?count=1', token);
    assert.equal(page.body.data.instances.length, 1);
    assertError(await h.call('GET', '/v1/instances?count=many', token), 400, /count/);
    const st = await h.call('GET', '/v1/instances/list?state=running', token);
    assert.equal(st.status, 200);
  });

  test('query and body together', async () => {
    const r = await h.call('GET', `/v1/instances/wait?timeout_ms=1000&state=stopped`, token, { uuid: ids[0] });
    assert.equal(r.body.status, 'success', r.text);
    assert.equal(r.body.data.instances[0].state, 'stopped');
  });
});

describe('OpenAPI document', () => {
  test('/v1/openapi.json lists every route of ENDPOINTS', async () => {
    const r = await h.call('GET', '/v1/openapi.json', token);
    assert.equal(r.status, 200);
    assert.match(r.body.openapi, /^3\./);
    const paths = r.body.paths as Record<string, Record<string, unknown>>;
    let n = 0;
    for (const def of ENDPOINTS) {
      for (const url of [def.path, def.localPath]) {
        if (!url) continue;
        const oa = url.replace(/:([a-z_]+)/g, '{$1}');
        assert.ok(paths[oa], `missing path ${oa}`);
        assert.ok(paths[oa]![def.method.toLowerCase()], `missing ${def.method} ${oa}`);
        n++;
      }
    }
    // beside the endpoint table: the event stream (src/api/events.ts), a route of its own
    assert.ok(paths['/v1/events']?.get, 'GET /v1/events is documented');
    const documented = Object.values(paths).reduce((k, ops) => k + Object.keys(ops).length, 0);
    assert.equal(documented, n + 1, 'the document has operations that are not routes');
    // the create body schema rejects unknown fields, as the server does
    const createOp = paths['/v1/instances']!.post as {
      requestBody: { content: { 'application/json': { schema: { oneOf: { additionalProperties: boolean }[] } } } };
    };
    assert.equal(createOp.requestBody.content['application/json'].schema.oneOf[0]!.additionalProperties, false);
  });
});
