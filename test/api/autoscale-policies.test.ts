/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * Autoscale step policies over real HTTP with the simulated machine
 * controller. Configurations are in autoscale.test.ts.
 */
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { alice, bad, entryError, groupWithMaster, h, ok, useAutoscaleDaemon } from '../helpers/autoscale-api.js';

useAutoscaleDaemon();

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
