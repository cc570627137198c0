import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { PolicyRec, StepRec } from '../store/types.js';
import { average, clamp, decide, percentChange, stepTarget } from './autoscale.js';

const step = (lower_bound: number | null, upper_bound: number | null, adjustment: number): StepRec => ({
  lower_bound,
  upper_bound,
  adjustment,
});
const policy = (name: string, adjustment_type: PolicyRec['adjustment_type'], steps: StepRec[]): PolicyRec => ({
  name,
  type: 'step',
  enabled: true,
  metric: 'cpu',
  adjustment_type,
  steps,
});
const size = { min: 1, max: 10 };

test('percent changes round toward zero but never to 0', () => {
  assert.equal(percentChange(4, 50), 2);
  assert.equal(percentChange(3, 50), 1); // 1.5 → 1
  assert.equal(percentChange(3, -50), -1); // -1.5 → -1
  assert.equal(percentChange(1, 10), 1); // 0.1 → 1
  assert.equal(percentChange(1, -10), -1); // -0.1 → -1
  assert.equal(percentChange(7, -30), -2); // -2.1 → -2
  assert.equal(percentChange(7, 30), 2); // 2.1 → 2
  assert.equal(percentChange(5, 0), 0);
  assert.equal(percentChange(0, 50), 0); // nothing to take a percentage of
  assert.ok(Object.is(percentChange(5, 0), 0), 'no negative zero');
});

test('step targets: change is relative, exact absolute, percent of the current count', () => {
  assert.equal(stepTarget('change', 2, 3), 5);
  assert.equal(stepTarget('change', -1, 3), 2);
  assert.equal(stepTarget('exact', 6, 3), 6);
  assert.equal(stepTarget('exact', 0, 3), 0);
  assert.equal(stepTarget('percent', 100, 3), 6);
  assert.equal(stepTarget('percent', -50, 3), 2);
  assert.equal(stepTarget('percent', 10, 3), 4);
});

test('lower bound inclusive, upper bound exclusive', () => {
  const p = policy('p', 'change', [step(null, 200, -1), step(200, 500, 0), step(500, null, 1)]);
  assert.deepEqual(
    [199, 200, 499, 500, 10_000, -5].map((m) => decide([p], m, 3, size).target),
    [2, 3, 3, 4, 4, 2],
  );
  assert.deepEqual(decide([p], 500, 3, size).applied, [{ policy: 'p', step: step(500, null, 1), target: 4 }]);
});

test('no applicable policy keeps the count, even outside the sizes', () => {
  const p = policy('p', 'change', [step(500, 800, 1)]);
  assert.deepEqual(decide([p], 100, 3, size), { target: 3, applied: [] });
  assert.deepEqual(decide([p], 800, 3, size), { target: 3, applied: [] });
  assert.deepEqual(decide([], 900, 12, size), { target: 12, applied: [] });
  assert.deepEqual(decide([{ ...p, enabled: false }], 600, 3, size), { target: 3, applied: [] });
});

test('the result is clamped to [min_size, max_size]', () => {
  const up = policy('up', 'change', [step(500, null, 5)]);
  const down = policy('down', 'change', [step(null, 100, -5)]);
  assert.equal(decide([up], 600, 3, { min: 1, max: 4 }).target, 4);
  assert.equal(decide([down], 50, 3, { min: 2, max: 4 }).target, 2);
  assert.equal(decide([policy('x', 'exact', [step(0, null, 0)])], 50, 3, { min: 0, max: 4 }).target, 0);
  assert.equal(decide([policy('x', 'exact', [step(0, null, 9)])], 50, 3, { min: 1, max: 4 }).target, 4);
  assert.equal(decide([policy('x', 'percent', [step(0, null, -200)])], 50, 3, { min: 1, max: 4 }).target, 1);
});

test('all policies run; the largest count asked for wins', () => {
  const a = policy('a', 'change', [step(300, null, 1)]);
  const b = policy('b', 'exact', [step(400, null, 6)]);
  const c = policy('c', 'percent', [step(null, 450, -50)]);
  const d = decide([a, b, c], 420, 4, size);
  assert.equal(d.target, 6);
  assert.deepEqual(
    d.applied.map((x) => [x.policy, x.target]),
    [
      ['a', 5],
      ['b', 6],
      ['c', 2],
    ],
  );
  assert.equal(decide([a, b, c], 350, 4, size).target, 5);
  assert.equal(decide([a, b, c], 100, 4, size).target, 2);
});

test('helpers: clamp and average', () => {
  assert.equal(clamp(5, 1, 4), 4);
  assert.equal(clamp(0, 1, 4), 1);
  assert.equal(clamp(2, 1, 4), 2);
  assert.equal(average([]), undefined);
  assert.equal(average([100, 300]), 200);
});
