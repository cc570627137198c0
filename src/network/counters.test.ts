import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tapName } from '../network/host.js';
import { tapCounters } from './counters.js';

test('tap counters are turned around: what the host tap sends, the guest received', () => {
  const sys = mkdtempSync(join(tmpdir(), 'uh-sysnet-'));
  try {
    const id = '0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d';
    const dir = join(sys, tapName(id), 'statistics');
    mkdirSync(dir, { recursive: true });
    for (const [f, v] of Object.entries({ rx_bytes: 100, rx_packets: 2, tx_bytes: 3000, tx_packets: 4 }))
      writeFileSync(join(dir, f), `${v}\n`);
    assert.deepEqual(tapCounters(id, sys), { rx_bytes: 3000, rx_packets: 4, tx_bytes: 100, tx_packets: 2 });
    assert.equal(tapCounters('1a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d', sys), undefined, 'no tap');
  } finally {
    rmSync(sys, { recursive: true, force: true });
  }
});
