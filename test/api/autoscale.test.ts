/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';
import { replyAsserts } from '../helpers/replies.js';

let h: Harness;
let alice: string;

const { ok, entryError, bad } = replyAsserts('service_groups');

const SVC = [{ port: 443, handlers: ['http', 'tls'] }];
let seq = 0;

/** A persistent group with one (stopped) instance in it. */
async function groupWithMaster(hh: Harness, token: string): Promise<{ group: any; master: any }> {
  const name = `as-${++seq}`;
  const [group] = ok(await hh.call('POST', '/v1/services', token, { name, services: SVC }));
  const [master] = ok(
    await hh.call('POST', '/v1/instances', token, { name: `${name}-m`, image: 'app:latest', service_group: { name } }),
    'instances',
  );
  return { group, master };
}

const instanceState = async (hh: Harness, token: string, uuid: string) =>
  ok(await hh.call('GET', '/v1/instances', token, { uuid }), 'instances')[0].state;

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  alice = await h.user('alice');
  await h.image('app:latest');
});
after(async () => h.close());

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

describe('policies', () => {
  let group: any;
  let base: string;
  const step = (name: string, steps: unknown[], extra: object = {}) => ({ name, type: 'step', steps, ...extra });

  before(async () => {
    const gm = await groupWithMaster(h, alice);
    group = gm.group;
    base = `/v1/services/${group.uuid}/autoscale/policies`;
    ok(await h.call('POST', `/v1/services/${group.uuid}/autoscale`, alice, { master: { uuid: gm.master.uuid } }));
  });

  test('add: a valid multi-step policy; get returns it with defaults filled in', async () => {
    const r = await h.call(
      'POST',
      base,
      alice,
      step('scale-out', [
        { upper_bound: 200, adjustment: -1 },
        { lower_bound: 200, upper_bound: 600, adjustment: 0 },
        { lower_bound: 600, upper_bound: 900, adjustment: 1 },
        { lower_bound: 900, upper_bound: null, adjustment: 3 },
      ]),
    );
    assert.deepEqual(ok(r, 'policies'), [{ status: 'success', uuid: group.uuid, name: group.name }]);
    const [p] = ok(await h.call('GET', `${base}/scale-out`, alice), 'policies');
    assert.deepEqual(p, {
      status: 'success',
      name: 'scale-out',
      type: 'step',
      enabled: true,
      metric: 'cpu',
      adjustment_type: 'change',
      steps: [
        { lower_bound: null, upper_bound: 200, adjustment: -1 },
        { lower_bound: 200, upper_bound: 600, adjustment: 0 },
        { lower_bound: 600, upper_bound: 900, adjustment: 1 },
        { lower_bound: 900, upper_bound: null, adjustment: 3 },
      ],
    });
  });

  test("adjustment_type aliases 'percentage' and 'absolute' are normalized", async () => {
    ok(
      await h.call(
        'POST',
        base,
        alice,
        step('pct', [{ lower_bound: 0, adjustment: 10 }], { adjustment_type: 'percentage' }),
      ),
      'policies',
    );
    ok(
      await h.call(
        'POST',
        base,
        alice,
        step('abs', [{ lower_bound: 0, adjustment: 2 }], { adjustment_type: 'absolute', metric: 'cpu' }),
      ),
      'policies',
    );
    ok(
      await h.call(
        'POST',
        base,
        alice,
        step('exact', [{ lower_bound: 0, adjustment: 2 }], { adjustment_type: 'exact' }),
      ),
      'policies',
    );
    assert.equal(ok(await h.call('GET', base, alice, { name: 'pct' }), 'policies')[0].adjustment_type, 'percent');
    assert.equal(ok(await h.call('GET', base, alice, { name: 'abs' }), 'policies')[0].adjustment_type, 'exact');
    bad(
      await h.call(
        'POST',
        base,
        alice,
        step('bad-adj', [{ lower_bound: 0, adjustment: 1 }], { adjustment_type: 'relative' }),
      ),
      /adjustment_type 'relative'/,
    );
    bad(
      await h.call('POST', base, alice, step('bad-metric', [{ lower_bound: 0, adjustment: 1 }], { metric: 'memory' })),
      /metric 'memory'/,
    );
  });

  test('name and type are required; names beyond 31 characters and types other than step answer 400', async () => {
    bad(await h.call('POST', base, alice, { type: 'step', steps: [{ lower_bound: 0, adjustment: 1 }] }), /name/);
    bad(await h.call('POST', base, alice, { name: 'no-type', steps: [{ lower_bound: 0, adjustment: 1 }] }), /type/);
    bad(
      await h.call('POST', base, alice, step('a'.repeat(32), [{ lower_bound: 0, adjustment: 1 }])),
      /parameter 'name'.*31/,
    );
    ok(await h.call('POST', base, alice, step('a'.repeat(31), [{ lower_bound: 0, adjustment: 1 }])), 'policies');
    bad(await h.call('POST', base, alice, step('Bad_Name', [{ lower_bound: 0, adjustment: 1 }])), /name/);
    bad(
      await h.call('POST', base, alice, { name: 'tt', type: 'target', steps: [{ lower_bound: 0, adjustment: 1 }] }),
      /type 'target' is not supported/,
    );
    bad(await h.call('POST', base, alice, step('no-steps', [])), /at least one step/);
    bad(await h.call('POST', base, alice, { name: 'x', type: 'step' }), /steps/);
  });

  test('each of the six step rules, violated, answers 400 naming it', async () => {
    const cases: [unknown[], RegExp][] = [
      [
        [{ lower_bound: 500, upper_bound: 100, adjustment: 1 }],
        /step rule 1: steps\[0\]: lower_bound \(500\) must be smaller than upper_bound \(100\)/,
      ],
      [[{ lower_bound: 100, upper_bound: 100, adjustment: 1 }], /step rule 1/],
      [
        [{ lower_bound: null, upper_bound: null, adjustment: 1 }],
        /step rule 2: steps\[0\]: lower_bound and upper_bound must not both be null/,
      ],
      [
        [
          { lower_bound: 0, upper_bound: 500, adjustment: 1 },
          { lower_bound: 400, upper_bound: 900, adjustment: 2 },
        ],
        /step rule 3: steps\[0\] and steps\[1\] overlap/,
      ],
      [
        [
          { lower_bound: 0, adjustment: 1 },
          { lower_bound: 500, upper_bound: 900, adjustment: 2 },
        ],
        /step rule 3/,
      ],
      [
        [
          { lower_bound: 500, upper_bound: 900, adjustment: 2 },
          { lower_bound: 0, upper_bound: 500, adjustment: 1 },
        ],
        /step rule 4: steps\[1\]: steps must be sorted ascending/,
      ],
      [
        [
          { lower_bound: 0, upper_bound: 400, adjustment: 1 },
          { lower_bound: 500, upper_bound: 900, adjustment: 2 },
        ],
        /step rule 5: steps\[0\] and steps\[1\] leave a gap between 400 and 500/,
      ],
      [
        [{ adjustment: 1 }],
        /step rule 6: steps\[0\]: only one of lower_bound and upper_bound may be null or unspecified/,
      ],
      [[{ lower_bound: null, adjustment: 1 }], /step rule 6/],
    ];
    for (const [steps, re] of cases) bad(await h.call('POST', base, alice, step('broken', steps)), re);
    // The same rules apply to policies given with the configuration.
    const gm = await groupWithMaster(h, alice);
    bad(
      await h.call('POST', `/v1/services/${gm.group.uuid}/autoscale`, alice, {
        master: { uuid: gm.master.uuid },
        policies: [step('p', cases[0]![0])],
      }),
      /step rule 1/,
    );
    assert.equal(ok(await h.call('GET', `/v1/services/${gm.group.uuid}/autoscale`, alice))[0].status, 'unconfigured');
    const all = ok(await h.call('GET', base, alice), 'policies');
    assert.ok(!all.some((p) => p.name === 'broken'));
  });

  test('a duplicate policy name is refused (code 23)', async () => {
    ok(await h.call('POST', base, alice, step('dup', [{ lower_bound: 0, adjustment: 1 }])), 'policies');
    entryError(
      await h.call('POST', base, alice, step('dup', [{ lower_bound: 0, adjustment: 2 }])),
      23,
      /already exists/,
      'policies',
    );
    const gm = await groupWithMaster(h, alice);
    bad(
      await h.call('POST', `/v1/services/${gm.group.uuid}/autoscale`, alice, {
        master: { uuid: gm.master.uuid },
        policies: [step('p', [{ lower_bound: 0, adjustment: 1 }]), step('p', [{ lower_bound: 0, adjustment: 1 }])],
      }),
      /policy 'p' is given twice/,
    );
  });

  test('get all, by path name and by body name; a missing one is not found', async () => {
    const all = ok(await h.call('GET', base, alice), 'policies');
    assert.ok(all.length >= 3);
    assert.ok(all.every((p) => p.status === 'success' && p.type === 'step'));
    assert.deepEqual(
      ok(await h.call('GET', `${base}/pct`, alice), 'policies'),
      ok(await h.call('GET', base, alice, { name: 'pct' }), 'policies'),
    );
    assert.deepEqual(ok(await h.call('GET', `${base}?name=pct`, alice), 'policies')[0].name, 'pct');
    entryError(await h.call('GET', `${base}/nope`, alice), 8, /No policy with name 'nope'/, 'policies');
    entryError(await h.call('GET', base, alice, { name: 'nope' }), 8, undefined, 'policies');
  });

  test('delete by path and by body', async () => {
    ok(await h.call('POST', base, alice, step('del-a', [{ lower_bound: 0, adjustment: 1 }])), 'policies');
    ok(await h.call('POST', base, alice, step('del-b', [{ lower_bound: 0, adjustment: 1 }])), 'policies');
    assert.deepEqual(ok(await h.call('DELETE', `${base}/del-a`, alice), 'policies'), [
      { status: 'success', name: 'del-a' },
    ]);
    assert.deepEqual(ok(await h.call('DELETE', base, alice, { name: 'del-b' }), 'policies'), [
      { status: 'success', name: 'del-b' },
    ]);
    const names = ok(await h.call('GET', base, alice), 'policies').map((p) => p.name);
    assert.ok(!names.includes('del-a') && !names.includes('del-b'), names.join());
    entryError(await h.call('DELETE', `${base}/del-a`, alice), 8, undefined, 'policies');
    bad(await h.call('DELETE', base, alice), /name/);
  });

  test('policy endpoints need a configuration (code 27) and an existing group of the caller', async () => {
    const gm = await groupWithMaster(h, alice);
    const url = `/v1/services/${gm.group.uuid}/autoscale/policies`;
    entryError(
      await h.call('POST', url, alice, step('p', [{ lower_bound: 0, adjustment: 1 }])),
      27,
      undefined,
      'policies',
    );
    entryError(await h.call('GET', url, alice), 27, undefined, 'policies');
    const bob = await h.user('bob-policies');
    entryError(await h.call('GET', base, bob), 8, undefined, 'policies');
    bad(await h.call('GET', '/v1/services/not-a-uuid/autoscale/policies', alice), /not a valid UUID/);
  });
});
