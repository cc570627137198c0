/**
 * HostLease's outcomes of renewals (the renewals themselves, with a real
 * PostgreSQL, are in test/store/contract.test.ts and test/api/hosts.test.ts).
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { HostLease } from './host-lease.js';
import type { HostRec, LeaseRenewal } from '../store/types.js';

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any

test('a renewal that held, passed on after the lease ran out on this loop: what was put off is looked at again', async () => {
  const calls: string[] = [];
  const lease = new HostLease(
    { store: {} as Any, clock: { now: () => Date.now() } as Any, config: { host: { leaseMs: 40 } } as Any },
    'h1',
    { epoch: 3 } as HostRec,
    {
      register: () => Promise.reject(new Error('not here')),
      lost: () => void calls.push('lost'),
      regained: () => void calls.push('regained'),
      log: { info: () => undefined, warn: () => undefined },
    },
  );
  const outcome = (r: LeaseRenewal): Promise<void> => (lease as Any).outcome(r);
  await outcome({ at: performance.now(), epoch: 3, ok: true });
  assert.equal(lease.held(), true);
  assert.deepEqual(calls, [], 'held on: nothing to look at again');
  await sleep(50); // past 0.8 of the 40 ms lease with no outcome: this agent stops acting
  assert.equal(lease.held(), false);
  await outcome({ at: performance.now(), epoch: 3, ok: true });
  assert.equal(lease.held(), true);
  assert.deepEqual(calls, ['regained'], 'the instances are looked at again (marks and boots put off meanwhile)');
  await lease.stop();
});
