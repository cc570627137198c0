/**
 * When the host keeper looks next (the failover itself, with a real store and
 * agents, is in test/api/hosts.test.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEAD_AFTER_MS, nextLookMs } from './hosts.js';
import type { HostRec } from '../store/types.js';

const NOW = Date.parse('2026-11-30T12:00:00Z');
const host = (id: string, expiresInMs: number | null, state: HostRec['state'] = 'live'): HostRec =>
  ({
    id,
    name: id,
    state,
    lease_expires_at: expiresInMs === null ? null : new Date(NOW + expiresInMs).toISOString(),
  }) as HostRec;

test('hosts renewing their leases: a look every quarter lease', () => {
  assert.equal(nextLookMs([host('a', 2500), host('b', 2900)], 'a', 3000, NOW), 750);
  assert.equal(nextLookMs([], 'a', 3000, NOW), 750);
});

test('a lease about to run out: the next look comes when it is due, grace included', () => {
  // b's lease ran out 600 ms ago: it is dead 1 s after it ran out, 400 ms from now (+5 ms past the edge)
  assert.equal(nextLookMs([host('a', 2500), host('b', -600)], 'a', 3000, NOW), DEAD_AFTER_MS - 600 + 5);
  assert.equal(nextLookMs([host('b', -DEAD_AFTER_MS + 100), host('c', -DEAD_AFTER_MS + 300)], 'a', 3000, NOW), 105);
});

test('its own host, dead hosts, hosts without a lease and leases already due do not move the look', () => {
  assert.equal(nextLookMs([host('a', -900)], 'a', 3000, NOW), 750, 'never its own host');
  assert.equal(nextLookMs([host('b', -900, 'dead')], 'a', 3000, NOW), 750, 'already dead');
  assert.equal(nextLookMs([host('b', null)], 'a', 3000, NOW), 750, 'no lease (from before leases)');
  assert.equal(nextLookMs([host('b', -5000)], 'a', 3000, NOW), 750, 'due already: the regular look takes it');
});
