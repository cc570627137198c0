// The refusals of placement when no host has room (capacity.ts `full`): each names the limit that refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { full, MAX_LIVE_PER_HOST, type HostUse } from './capacity.js';
import { DEFAULTS } from '../config.js';
import type { HostRec } from '../store/types.js';

const host = (name: string, memory_mb: number, vcpus: number | null): HostRec =>
  ({ id: name, name, state: 'live', memory_mb, vcpus }) as HostRec;
const use = (h: HostRec, vms: number, memoryMb: number): HostUse => ({ host: h, vms, memoryMb, members: 0 });
const c = { ...DEFAULTS.capacity, vcpusPerCore: 16 };

test('several hosts, every one at its vCPU budget: the refusal names the vCPU budget, not memory', () => {
  const e = full(c, [use(host('h1', 20_000, 32), 32, 512), use(host('h2', 20_000, 16), 16, 256)], 16, false);
  assert.match(
    e.message,
    /^no host has room: starting needs 1 vCPU, and every host that takes instances has its whole vCPU budget in use \(at most 32 vCPU on one host/,
  );
});

test('several hosts, one short of memory: the refusal names memory and the largest free memory', () => {
  const e = full(c, [use(host('h1', 1000, 32), 32, 512), use(host('h2', 300, null), 2, 200)], 16, false);
  assert.match(e.message, /^no host has room: starting needs 64 MB \(16 MB of guest memory \+ 48 MB per VM\)/);
  assert.match(e.message, /the largest free guest memory on a host that takes instances is 4 MB \(host 'h2'\)/);
});

test('a host with as many live instances as its bridge has ports: the refusal names that limit, not memory', () => {
  const big = { ...c, vcpusPerCore: 0 }; // no vCPU limit
  const one = full(big, [use(host('h1', 10_000_000, null), MAX_LIVE_PER_HOST, 1000)], 16, true);
  assert.match(one.message, /^host is full: a host's private network has ports for 1022 live instances/);
  const two = full(
    big,
    [
      use(host('h1', 10_000_000, null), MAX_LIVE_PER_HOST, 1000),
      use(host('h2', 10_000_000, null), MAX_LIVE_PER_HOST, 0),
    ],
    16,
    false,
  );
  assert.match(two.message, /^no host has room: a host's private network has ports for 1022 live instances/);
});
