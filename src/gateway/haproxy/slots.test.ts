import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { route } from '../testing.js';
import type { Route } from '../types.js';
import { MIN_SLOTS, SlotPool } from './slots.js';

const byPort = (routes: Route[]): Map<number, Route[]> => {
  const m = new Map<number, Route[]>();
  for (const r of routes) m.set(r.port, [...(m.get(r.port) ?? []), r]);
  return m;
};
const web = (g: string, port = 443) => route(g, port, 8080, ['http', 'tls'], [`${g}.example.test`]);
const names = (slots: Map<number, { name: string }[]>) => [...slots.values()].flat().map((s) => s.name);

describe('SlotPool: pre-rendered backends handed to groups', () => {
  test('a port gets MIN_SLOTS backends per flavor it uses; the rendered set does not change as groups come and go', () => {
    const pool = new SlotPool();
    const a = pool.assign(byPort([web('a'), route('r', 80, 443, ['http', 'redirect'], ['a.example.test'])]));
    assert.equal(a.get(443)!.length, MIN_SLOTS);
    assert.equal(a.get(80)!.length, MIN_SLOTS);
    assert.equal(a.get(443)!.filter((s) => s.route).length, 1);
    const b = pool.assign(byPort([web('b'), web('c'), route('r', 80, 443, ['http', 'redirect'], ['a.example.test'])]));
    assert.deepEqual(names(b), names(a), 'same backends: no reload');
    assert.deepEqual(
      b
        .get(443)!
        .filter((s) => s.route)
        .map((s) => s.route!.groupId)
        .sort(),
      ['b', 'c'],
    );
  });

  test('a group keeps its slot; a freed slot is not handed on in the same assignment, and comes last after that', () => {
    const pool = new SlotPool();
    pool.assign(byPort([web('a')]));
    const slotA = pool.slotOf(443, 'a')!;
    pool.assign(byPort([web('a'), web('b')]));
    assert.equal(pool.slotOf(443, 'a'), slotA, 'kept');
    pool.assign(byPort([web('b'), web('c')]));
    assert.equal(pool.slotOf(443, 'a'), undefined);
    assert.notEqual(pool.slotOf(443, 'c'), slotA, "not a's slot, freed by this very assignment");
    // fill every never-used slot: a's comes only when nothing else is free
    const more = Array.from({ length: MIN_SLOTS - 3 }, (_, i) => web(`m${i}`));
    pool.assign(byPort([web('b'), web('c'), ...more]));
    assert.ok(!more.some((r) => pool.slotOf(443, r.groupId) === slotA));
    const full = pool.assign(byPort([web('b'), web('c'), ...more, web('z')]));
    assert.equal(full.get(443)!.length, MIN_SLOTS, 'no growth while a freed slot remains');
    assert.equal(pool.slotOf(443, 'z'), slotA);
  });

  test('a full pool doubles; a group changing flavor moves to a slot of its new flavor; a port gone takes its pool', () => {
    const pool = new SlotPool();
    const many = Array.from({ length: MIN_SLOTS + 1 }, (_, i) => web(`g${i}`));
    const grown = pool.assign(byPort(many));
    assert.equal(grown.get(443)!.length, MIN_SLOTS * 2);
    assert.equal(new Set(many.map((r) => pool.slotOf(443, r.groupId))).size, many.length);
    const tcp = route('g0', 443, 9000, ['tls'], ['g0.example.test']);
    const moved = pool.assign(byPort([tcp, ...many.slice(1)]));
    assert.match(pool.slotOf(443, 'g0')!, /^g443_tcp\d+$/);
    assert.equal(moved.get(443)!.find((s) => s.name === pool.slotOf(443, 'g0'))!.route, tcp);
    const other = pool.assign(byPort([web('x', 8443)]));
    assert.deepEqual([...other.keys()], [8443]);
    assert.equal(pool.slotOf(443, 'g1'), undefined);
  });
});
