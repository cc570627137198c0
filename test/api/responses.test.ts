/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * Real answers against the OpenAPI document's response schemas (issue 24,
 * "Typed answers"): every entry of `data.<plural>` of an endpoint with a
 * typed (closed) schema must match it, or be an error entry. Endpoints
 * still typed by the generic summary are listed by the document test.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { FormatRegistry, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import '../../src/api/request.js'; // registers the formats of the API's schemas
import { ENDPOINTS } from '../../src/api/routes/index.js';
import type { EndpointDef } from '../../src/api/endpoint.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { testCa, testLeaf } from '../helpers/certs.js';

if (!FormatRegistry.Has('date-time')) FormatRegistry.Set('date-time', (v) => !Number.isNaN(Date.parse(v)));

const ErrorEntry = Type.Object(
  {
    status: Type.Literal('error'),
    uuid: Type.Optional(Type.String()),
    name: Type.Optional(Type.String()),
    message: Type.String(),
    error: Type.Integer(),
  },
  { additionalProperties: false },
);

/** The endpoint of the table answering `method path` (a local-scope path too). */
function endpointOf(method: string, path: string): EndpointDef {
  const pattern = (u: string) => new RegExp(`^${u.replace(/:[a-z_]+/g, '[^/]+')}$`);
  const p = path.split('?')[0]!;
  const all = (ENDPOINTS as EndpointDef[]).filter((d) => d.method === method);
  // a global path first: /v1/instances/log is not the instance named by uuid "log"
  const def =
    all.find((d) => d.path === p) ??
    all.find((d) => [d.path, d.localPath].some((u) => u !== undefined && pattern(u).test(p)));
  assert.ok(def, `no endpoint for ${method} ${path}`);
  return def;
}

describe('answers match the response schemas of the OpenAPI document', () => {
  let h: Harness;
  let dev: string;
  let plain: string;
  /** entries checked per endpoint */
  const checked = new Map<string, number>();

  /** Calls the API and checks every entry of the answer against the endpoint's schema. */
  async function call(method: string, path: string, token: string, body?: unknown): Promise<any> {
    const r = await h.call(method, path, token, body);
    assert.equal(r.status, 200, r.text);
    const def = endpointOf(method, path);
    const entries = (r.body.data?.[def.plural] ?? []) as unknown[];
    for (const e of entries) {
      const ok = Value.Check(def.response, e) || Value.Check(ErrorEntry, e);
      if (!ok) {
        const errs = [...Value.Errors(def.response, e)].slice(0, 5).map((x) => `${x.path}: ${x.message}`);
        assert.fail(`${method} ${path}: an entry does not match the schema:\n${JSON.stringify(e)}\n${errs.join('\n')}`);
      }
    }
    const key = `${def.method} ${def.path}`;
    checked.set(key, (checked.get(key) ?? 0) + entries.length);
    return r.body;
  }

  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    dev = await h.user('dev', true);
    plain = await h.user('plain');
    await h.image('app:latest');
  });
  after(async () => h?.close());

  test('instances: create, get (details and not, list), start, stop, suspend, wait, log, delete', async () => {
    for (const [u, token] of [dev, plain].entries()) {
      const created = await call('POST', '/v1/instances', token, [
        { name: 'plain', image: 'app:latest' },
        {
          name: 'web',
          image: 'app:latest',
          autostart: true,
          wait_timeout_ms: 10_000,
          args: ['a'],
          env: { K: 'v' },
          service_group: {
            services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
            domains: [{ name: `web-${u}` }, { name: `web-${u}.example.com.` }],
          },
          features: ['scale-to-zero'],
        },
        { name: 'plain', image: 'app:latest' }, // taken: an error entry
      ]);
      assert.deepEqual(
        created.data.instances.map((e: any) => e.status),
        ['success', 'success', 'error'],
      );
      await call('GET', '/v1/instances', token, [{ name: 'web' }, { name: 'plain' }, { name: 'nope' }]);
      await call('GET', '/v1/instances?details=false', token, { name: 'web' });
      await call('GET', '/v1/instances', token);
      await call('GET', '/v1/instances/list', token);
      await call('GET', '/v1/instances/wait', token, { name: 'web', state: 'running', timeout_ms: 10_000 });
      await call('PUT', '/v1/instances/start', token, { name: 'plain', wait_timeout_ms: 10_000 });
      await call('GET', '/v1/instances/log', token, { name: 'plain' });
      await call('GET', '/v1/instances/metrics', token, [{ name: 'plain' }, { name: 'web' }]);
      await call('PATCH', '/v1/instances', token, [
        { name: 'web', prop: 'tags', op: 'set', value: ['t'] },
        { name: 'web', prop: 'tags', op: 'set', value: 'not a list' },
      ]);
      await call('GET', '/v1/instances/history', token, { name: 'web' });
      await call('PUT', '/v1/instances/suspend', token, { name: 'plain' });
      await call('PUT', '/v1/instances/stop', token, [{ name: 'web' }, { name: 'plain' }]);
      await call('GET', '/v1/instances/wait', token, { name: 'web', state: 'stopped', timeout_ms: 10_000 });
      await call('GET', '/v1/instances', token, { name: 'web' }); // stopped: the stop fields
      await call('DELETE', '/v1/instances', token, [{ name: 'web' }, { name: 'plain' }]);
    }
    for (const k of [
      'POST /v1/instances',
      'GET /v1/instances',
      'PUT /v1/instances/start',
      'PUT /v1/instances/stop',
      'PUT /v1/instances/suspend',
      'GET /v1/instances/wait',
      'GET /v1/instances/log',
      'DELETE /v1/instances',
      'GET /v1/instances/list',
      'GET /v1/instances/metrics',
      'PATCH /v1/instances',
      'GET /v1/instances/history',
    ])
      assert.ok((checked.get(k) ?? 0) > 0, `${k} was checked`);
  });

  test('volumes: create, get (details and not, list), attach, detach, delete', async () => {
    await call('POST', '/v1/volumes', plain, [
      { name: 'v1', size_mb: 8 },
      { name: 'v1', size_mb: 8 }, // taken: an error entry
    ]);
    await h.until(
      async () =>
        (await h.call('GET', '/v1/volumes', plain, { name: 'v1' })).body.data.volumes[0].state === 'available' ||
        undefined,
    );
    await call('POST', '/v1/instances', plain, { name: 'holder', image: 'app:latest' });
    await call('PUT', '/v1/volumes/attach', plain, { name: 'v1', attach_to: { name: 'holder' }, at: '/data' });
    await call('GET', '/v1/volumes', plain, [{ name: 'v1' }, { name: 'nope' }]);
    await call('GET', '/v1/volumes?details=false', plain, { name: 'v1' });
    await call('GET', '/v1/volumes', plain);
    await call('GET', '/v1/volumes/list', plain);
    await call('GET', '/v1/instances', plain, { name: 'holder' }); // with its volume
    await call('PUT', '/v1/volumes/detach', plain, { name: 'v1' });
    // a template of it: get (details and not, list) and delete
    const made = await call('POST', '/v1/volumes/templates', plain, { name: 'v1' });
    assert.equal(made.data.volumes[0].state, 'template', JSON.stringify(made));
    const copy = await call('POST', '/v1/volumes/clone', plain, { name: 'v1', vol_name: 'v1-copy' });
    assert.equal(copy.data.volumes[0].status, 'success', JSON.stringify(copy));
    await call('DELETE', '/v1/volumes', plain, { name: 'v1-copy' });
    const got = await call('GET', '/v1/volumes/templates', plain, [{ name: 'v1' }, { name: 'nope' }]);
    assert.equal(got.data.volumes[0].status, 'success', JSON.stringify(got));
    await call('GET', '/v1/volumes/templates?details=false', plain, { name: 'v1' });
    await call('GET', '/v1/volumes/templates', plain);
    await call('DELETE', '/v1/volumes/templates', plain, { name: 'v1' });
    await call('POST', '/v1/volumes', plain, { name: 'v2', size_mb: 8 });
    await call('DELETE', '/v1/volumes', plain, { name: 'v2' });
    for (const k of [
      'POST /v1/volumes',
      'GET /v1/volumes',
      'PUT /v1/volumes/attach',
      'PUT /v1/volumes/detach',
      'DELETE /v1/volumes',
      'GET /v1/volumes/templates',
      'DELETE /v1/volumes/templates',
      'GET /v1/volumes/list',
      'POST /v1/volumes/templates',
      'POST /v1/volumes/clone',
    ])
      assert.ok((checked.get(k) ?? 0) > 0, `${k} was checked`);
  });

  test('service groups: create, get (details and not, list), delete', async () => {
    await call('POST', '/v1/services', plain, [
      {
        name: 'grp',
        services: [
          { port: 443, destination_port: 8080, handlers: ['tls', 'http'] },
          { port: 80, destination_port: 443, handlers: ['http', 'redirect'] },
        ],
        domains: [{ name: 'grp' }, { name: 'grp.example.org.' }],
        soft_limit: 5,
        hard_limit: 10,
      },
      { name: 'grp', services: [] }, // taken: an error entry
    ]);
    await call('POST', '/v1/instances', plain, { name: 'member', image: 'app:latest', service_group: { name: 'grp' } });
    await call('GET', '/v1/services', plain, [{ name: 'grp' }, { name: 'nope' }]);
    await call('GET', '/v1/services?details=false', plain, { name: 'grp' });
    await call('GET', '/v1/services', plain);
    await call('GET', '/v1/services/list', plain);
    await call('DELETE', '/v1/instances', plain, { name: 'member' });
    await call('DELETE', '/v1/services', plain, { name: 'grp' });
    for (const k of ['POST /v1/services', 'GET /v1/services', 'DELETE /v1/services', 'GET /v1/services/list'])
      assert.ok((checked.get(k) ?? 0) > 0, `${k} was checked`);
  });

  test('certificates: upload, get (details and not, list; pending and valid), delete', async () => {
    const ca = await testCa();
    const leaf = await testLeaf(ca, ['shop.example.net']);
    const up = await call('POST', '/v1/certificates', plain, {
      name: 'shop',
      cn: 'shop.example.net',
      chain: leaf.cert,
      pkey: leaf.key,
    });
    assert.equal(up.data.certificates[0].status, 'success', JSON.stringify(up));
    // a custom name without a certificate gets a pending one (ACME is off here: it stays pending)
    await call('POST', '/v1/services', plain, {
      name: 'acme-grp',
      services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
      domains: [{ name: 'pending.example.net.' }],
    });
    const all = await call('GET', '/v1/certificates', plain);
    assert.ok(all.data.certificates.length >= 2, 'the upload and the pending one (and those of earlier tests)');
    await call('GET', '/v1/certificates', plain, [
      ...all.data.certificates.map((c: any) => ({ uuid: c.uuid })),
      { name: 'nope' },
    ]);
    await call('GET', '/v1/certificates?details=false', plain, { name: 'shop' });
    await call('GET', '/v1/certificates/list', plain);
    const renewed = await testLeaf(ca, ['shop.example.net'], { serial: '0b0b' });
    const rep = await call('PUT', '/v1/certificates', plain, { name: 'shop', chain: renewed.cert, pkey: renewed.key });
    assert.equal(rep.data.certificates[0].status, 'success', JSON.stringify(rep));
    await call('DELETE', '/v1/certificates', plain, { name: 'shop' });
    for (const k of [
      'POST /v1/certificates',
      'PUT /v1/certificates',
      'GET /v1/certificates',
      'DELETE /v1/certificates',
      'GET /v1/certificates/list',
    ])
      assert.ok((checked.get(k) ?? 0) > 0, `${k} was checked`);
  });

  test('templates and checkpoints: make, take, get (details and not, list), history, delete', async () => {
    await call('POST', '/v1/instances', plain, [
      { name: 'tpl-src', image: 'app:latest', autostart: true, wait_timeout_ms: 10_000 },
      { name: 'ck-src', image: 'app:latest', autostart: true, wait_timeout_ms: 10_000 },
    ]);
    await call('POST', '/v1/instances/templates', plain, [{ name: 'tpl-src', timeout_s: 10 }, { name: 'nope' }]);
    await call('POST', '/v1/instances/checkpoints', plain, { from: { name: 'ck-src' }, name: 'ck1', timeout_s: 10 });
    await call('GET', '/v1/instances/templates', plain, { name: 'tpl-src' });
    await call('GET', '/v1/instances/templates?details=false', plain, { name: 'tpl-src' });
    await call('GET', '/v1/instances/templates', plain);
    await call('GET', '/v1/instances/checkpoints', plain, { name: 'ck1' });
    await call('GET', '/v1/instances/checkpoints', plain);
    const hist = await call('GET', '/v1/instances/checkpoints/history', plain, { name: 'ck-src' });
    assert.equal(hist.data.instances[0].history.length, 1);
    await call('DELETE', '/v1/instances/checkpoints', plain, { name: 'ck1' });
    await call('DELETE', '/v1/instances/templates', plain, { name: 'tpl-src' });
    await call('DELETE', '/v1/instances', plain, { name: 'ck-src' });
    for (const k of [
      'POST /v1/instances/templates',
      'GET /v1/instances/templates',
      'DELETE /v1/instances/templates',
      'POST /v1/instances/checkpoints',
      'GET /v1/instances/checkpoints',
      'GET /v1/instances/checkpoints/history',
      'DELETE /v1/instances/checkpoints',
    ])
      assert.ok((checked.get(k) ?? 0) > 0, `${k} was checked`);
  });

  test('autoscale and its policies: configure, get (unconfigured too), add, get, delete', async () => {
    await call('POST', '/v1/services', plain, {
      name: 'scaled',
      services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
    });
    await call('POST', '/v1/instances', plain, {
      name: 'scaled-m',
      image: 'app:latest',
      service_group: { name: 'scaled' },
    });
    await call('GET', '/v1/services/autoscale', plain, { name: 'scaled' }); // unconfigured
    await call('POST', '/v1/services/autoscale', plain, {
      name: 'scaled',
      master: { name: 'scaled-m' },
      min_size: 1,
      max_size: 3,
    });
    const g = (await call('GET', '/v1/services/autoscale', plain, { name: 'scaled' })).data.service_groups[0];
    const base = `/v1/services/${g.uuid as string}/autoscale/policies`;
    await call('POST', base, plain, {
      name: 'out',
      type: 'step',
      steps: [
        { lower_bound: 0, upper_bound: 500, adjustment: 0 },
        { lower_bound: 500, adjustment: 1 },
      ],
    });
    await call('POST', base, plain, {
      name: 'in',
      type: 'step',
      adjustment_type: 'exact',
      steps: [{ upper_bound: 100, adjustment: 1 }],
    });
    await call('GET', base, plain);
    await call('GET', `${base}/out`, plain);
    await call('GET', '/v1/services/autoscale', plain, { name: 'scaled' });
    await call('DELETE', `${base}/out`, plain);
    await call('DELETE', base, plain, { name: 'in' });
    await call('DELETE', '/v1/services/autoscale', plain, { name: 'scaled' });
    for (const k of [
      'POST /v1/services/autoscale',
      'GET /v1/services/autoscale',
      'DELETE /v1/services/autoscale',
      'POST /v1/services/:uuid/autoscale/policies',
      'GET /v1/services/:uuid/autoscale/policies',
      'GET /v1/services/:uuid/autoscale/policies/:policy',
      'DELETE /v1/services/:uuid/autoscale/policies',
      'DELETE /v1/services/:uuid/autoscale/policies/:policy',
    ])
      assert.ok((checked.get(k) ?? 0) > 0, `${k} was checked`);
  });

  test('images: list and get', async () => {
    await call('GET', '/v1/images/list', plain);
    await call('GET', '/v1/images', plain, { tag: 'app:latest' });
    for (const k of ['GET /v1/images/list', 'GET /v1/images']) assert.ok((checked.get(k) ?? 0) > 0, `${k} was checked`);
  });

  test('events: every event of the log matches the InstanceEvent schema of the document', async () => {
    const { request } = await import('undici');
    const { InstanceEvent } = await import('../../src/api/schemas/event-responses.js');
    const doc = (await h.call('GET', '/v1/openapi.json', plain)).body;
    assert.ok(doc.paths['/v1/events'].get.responses['200'].content['text/event-stream'].schema);
    const r = await request(`${h.url}/v1/events?from=0`, { headers: { authorization: `Bearer ${plain}` } });
    let text = '';
    for await (const chunk of r.body) {
      text += chunk.toString();
      if (text.includes(': caught-up')) break;
    }
    r.body.destroy();
    const events = text
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => JSON.parse(l.slice(6)));
    assert.ok(events.length > 20, `the earlier tests' events (${events.length})`);
    for (const e of events) assert.ok(Value.Check(InstanceEvent, e), JSON.stringify(e));
    for (const t of ['created', 'state', 'deleted'])
      assert.ok(
        events.some((e) => e.type === t),
        t,
      );
  });

  test('quotas', async () => {
    await call('GET', '/v1/users/quotas', plain);
    assert.ok((checked.get('GET /v1/users/quotas') ?? 0) > 0);
  });
});
