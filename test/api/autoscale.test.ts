/**
 * Autoscale configurations over real HTTP with the simulated machine
 * controller: create, get, delete, their parameters and the account limits.
 * Policies are in autoscale-policies.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import {
  alice,
  bad,
  entryError,
  groupWithMaster,
  h,
  instanceState,
  ok,
  SVC,
  useAutoscaleDaemon,
} from '../helpers/autoscale-api.js';

useAutoscaleDaemon();

describe('configuration', () => {
  test('create with defaults, then get shows every field', async () => {
    const { group, master } = await groupWithMaster(h, alice);
    const [c] = ok(
      await h.call('POST', '/v1/services/autoscale', alice, { name: group.name, master: { name: master.name } }),
    );
    assert.deepEqual(c, { status: 'success', uuid: group.uuid, name: group.name });
    const [g] = ok(await h.call('GET', `/v1/services/${group.uuid}/autoscale`, alice));
    assert.deepEqual(g, {
      status: 'success',
      uuid: group.uuid,
      name: group.name,
      enabled: true,
      min_size: 1,
      max_size: 4,
      warmup_time_ms: 1000,
      cooldown_time_ms: 1000,
      master: { uuid: master.uuid, name: master.name },
      policies: [],
    });
    // The same through the global path, by name.
    assert.deepEqual(ok(await h.call('GET', '/v1/services/autoscale', alice, { name: group.name }))[0], g);
  });

  test('create with explicit values and policies', async () => {
    const { group, master } = await groupWithMaster(h, alice);
    const policy = {
      name: 'cpu-up',
      type: 'step',
      adjustment_type: 'percentage',
      steps: [
        { lower_bound: 500, upper_bound: 800, adjustment: 50 },
        { lower_bound: 800, adjustment: 100 },
      ],
    };
    ok(
      await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, {
        master: { uuid: master.uuid },
        min_size: 2,
        max_size: 6,
        warmup_time_ms: 5000,
        cooldown_time_ms: 7000,
        policies: [policy],
      }),
    );
    const [g] = ok(await h.call('GET', `/v1/services/${group.uuid}/autoscale`, alice));
    assert.equal(g.min_size, 2);
    assert.equal(g.max_size, 6);
    assert.equal(g.warmup_time_ms, 5000);
    assert.equal(g.cooldown_time_ms, 7000);
    assert.deepEqual(g.policies, [
      {
        name: 'cpu-up',
        type: 'step',
        enabled: true,
        metric: 'cpu',
        adjustment_type: 'percent',
        steps: [
          { lower_bound: 500, upper_bound: 800, adjustment: 50 },
          { lower_bound: 800, upper_bound: null, adjustment: 100 },
        ],
      },
    ]);
  });

  test('the master must be attached to the group', async () => {
    const { group } = await groupWithMaster(h, alice);
    const [outsider] = ok(await h.call('POST', '/v1/instances', alice, { image: 'app:latest' }), 'instances');
    entryError(
      await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: { uuid: outsider.uuid } }),
      7,
      /not attached to service group/,
    );
    entryError(
      await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: { name: 'ghost' } }),
      8,
      /ghost/,
    );
    bad(
      await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, {
        master: { uuid: outsider.uuid, name: 'x' },
      }),
      /master: give either/,
    );
    bad(
      await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: {} }),
      /master: 'uuid' or 'name' is required/,
    );
    bad(await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, {}), /master/);
    assert.equal(ok(await h.call('GET', `/v1/services/${group.uuid}/autoscale`, alice))[0].status, 'unconfigured');
  });

  test('already configured answers code 26', async () => {
    const { group, master } = await groupWithMaster(h, alice);
    ok(await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: { uuid: master.uuid } }));
    entryError(
      await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: { uuid: master.uuid } }),
      26,
    );
  });

  test('min_size larger than max_size answers 400', async () => {
    const { group, master } = await groupWithMaster(h, alice);
    bad(
      await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, {
        master: { uuid: master.uuid },
        min_size: 3,
        max_size: 2,
      }),
      /min_size \(3\) must not be larger than max_size \(2\)/,
    );
    bad(
      await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, {
        master: { uuid: master.uuid },
        min_size: 5,
      }),
      /max_size \(4\)/,
    );
    assert.equal(ok(await h.call('GET', `/v1/services/${group.uuid}/autoscale`, alice))[0].status, 'unconfigured');
  });

  test("get answers entry status 'unconfigured' when there is no configuration", async () => {
    const { group } = await groupWithMaster(h, alice);
    const r = await h.call('GET', `/v1/services/${group.uuid}/autoscale`, alice);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body.data.service_groups, [{ status: 'unconfigured', uuid: group.uuid, name: group.name }]);
  });

  test('delete: not configured answers code 27; otherwise removes it and starts a stopped master', async () => {
    const { group, master } = await groupWithMaster(h, alice);
    entryError(await h.call('DELETE', `/v1/services/${group.uuid}/autoscale`, alice), 27);
    ok(await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: { uuid: master.uuid } }));
    assert.equal(await instanceState(h, alice, master.uuid), 'stopped');
    const [d] = ok(await h.call('DELETE', '/v1/services/autoscale', alice, { uuid: group.uuid }));
    assert.deepEqual(d, { status: 'success', uuid: group.uuid, name: group.name });
    const [w] = ok(
      await h.call('GET', '/v1/instances/wait', alice, { uuid: master.uuid, state: 'running', timeout_ms: 10000 }),
      'instances',
    );
    assert.equal(w.state, 'running');
    assert.equal(ok(await h.call('GET', `/v1/services/${group.uuid}/autoscale`, alice))[0].status, 'unconfigured');
    // It can be configured again.
    ok(await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: { uuid: master.uuid } }));
  });

  test('delete also deletes the instances autoscale created, never the master', async () => {
    const { group, master } = await groupWithMaster(h, alice);
    ok(await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: { uuid: master.uuid } }));
    // Stand in for the autoscaler: a clone of the master marked as created by autoscale.
    const cloneId = randomUUID();
    await h.daemon.store.tx(async (tx) => {
      const m = (await tx.instances.getAny(master.uuid))!;
      await tx.instances.insert({
        ...m,
        id: cloneId,
        name: `${m.name}-clone`,
        private_ip: null,
        mac: null,
        nic_id: null,
        autoscale_group_id: group.uuid,
      });
    });
    ok(await h.call('DELETE', `/v1/services/${group.uuid}/autoscale`, alice));
    entryError(await h.call('GET', '/v1/instances', alice, { uuid: cloneId }), 8, undefined, 'instances');
    assert.equal(
      ok(await h.call('GET', '/v1/instances', alice, { uuid: master.uuid }), 'instances')[0].uuid,
      master.uuid,
    );
  });

  test('scale-to-zero on instance create configures min 0, max 1 and the defaults', async () => {
    const [i] = ok(
      await h.call('POST', '/v1/instances', alice, {
        image: 'app:latest',
        features: ['scale-to-zero'],
        service_group: { services: SVC },
      }),
      'instances',
    );
    const [g] = ok(await h.call('GET', `/v1/services/${i.service_group.uuid}/autoscale`, alice));
    assert.equal(g.enabled, true);
    assert.equal(g.min_size, 0);
    assert.equal(g.max_size, 1);
    assert.equal(g.warmup_time_ms, 1000);
    assert.equal(g.cooldown_time_ms, 1000);
    assert.deepEqual(g.master, { uuid: i.uuid, name: i.name });
    assert.deepEqual(g.policies, []);
    assert.equal(ok(await h.call('GET', '/v1/services', alice, { uuid: i.service_group.uuid }))[0].autoscale, true);
  });
});

describe('account limits', () => {
  let h2: Harness;
  let tok: string;
  before(async () => {
    h2 = await startHarness({ defaultQuotas: { limits: { min_autoscale_size: 1, max_autoscale_size: 3 } } }, (s) => [
      simMachines(s),
    ]);
    tok = await h2.user('dave');
    await h2.image('app:latest');
  });
  after(async () => h2.close());

  test('sizes outside the account limits answer code 29 and configure nothing', async () => {
    const { group, master } = await groupWithMaster(h2, tok);
    const url = `/v1/services/${group.uuid}/autoscale`;
    entryError(
      await h2.call('POST', url, tok, { master: { uuid: master.uuid } }),
      29,
      /max_size 4 is outside the account limits \[1, 3\]/,
    );
    entryError(
      await h2.call('POST', url, tok, { master: { uuid: master.uuid }, min_size: 0, max_size: 2 }),
      29,
      /min_size 0/,
    );
    assert.equal(ok(await h2.call('GET', url, tok))[0].status, 'unconfigured');
    ok(await h2.call('POST', url, tok, { master: { uuid: master.uuid }, min_size: 1, max_size: 3 }));
  });

  test('limits both 1 disable autoscale (code 28)', async () => {
    const eve = await h2.user('eve');
    await h2.daemon.services.users.setQuotas('eve', { limits: { min_autoscale_size: 1, max_autoscale_size: 1 } });
    const { group, master } = await groupWithMaster(h2, eve);
    entryError(
      await h2.call('POST', `/v1/services/${group.uuid}/autoscale`, eve, {
        master: { uuid: master.uuid },
        min_size: 1,
        max_size: 1,
      }),
      28,
      /not enabled/,
    );
  });
});
