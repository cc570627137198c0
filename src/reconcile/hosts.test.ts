import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { DEAD_AFTER_MS, nextLookIn } from './hosts.js';

describe('when a host keeper looks at the hosts next', () => {
  const now = Date.parse('2026-11-29T12:00:00.000Z');
  const at = (ms: number) => new Date(now + ms).toISOString();

  test('as the first other live host’s lease and its grace run out, or on the quarter-lease beat', () => {
    const hosts = [
      { id: 'self', state: 'live' as const, lease_expires_at: at(100) },
      { id: 'h2', state: 'live' as const, lease_expires_at: at(1500) },
      { id: 'h3', state: 'cordoned' as const, lease_expires_at: at(400) },
      { id: 'h4', state: 'dead' as const, lease_expires_at: at(-5000) },
      { id: 'h5', state: 'live' as const, lease_expires_at: null },
    ];
    // h3 (cordoned, still leased) first; its own host and the dead one do not count
    assert.equal(nextLookIn(hosts, 'self', now, 2500), 400 + DEAD_AFTER_MS + 5);
    assert.equal(nextLookIn(hosts.slice(0, 2), 'self', now, 2500), 2500, 'beyond the beat: the beat');
    assert.equal(nextLookIn(hosts.slice(0, 2), 'self', now, 5000), 1500 + DEAD_AFTER_MS + 5);
  });

  test('a lease already run out: soon, never a busy loop', () => {
    const hosts = [{ id: 'h2', state: 'live' as const, lease_expires_at: at(-10_000) }];
    assert.equal(nextLookIn(hosts, 'self', now, 2500), 20);
    assert.equal(nextLookIn([], 'self', now, 2500), 2500);
  });
});
