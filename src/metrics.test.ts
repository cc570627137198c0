import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Gauge } from 'prom-client';
import { DaemonMetrics } from './metrics.js';
import type { Store } from './store/types.js';

/** What the scrape-time collectors read: a store without instances. */
const emptyStore = { read: async (fn: (tx: unknown) => unknown) => fn({ instances: { all: async () => [] } }) };

test('a NaN sample is written as the text format spells it (NaN), which strict parsers require', async () => {
  const m = new DaemonMetrics(emptyStore as unknown as Store);
  const g = new Gauge({ name: 'uh_test_nan', help: 'a sample with no value yet', registers: [m.registry] });
  g.set(NaN);
  const { body } = await m.render();
  assert.match(body, /^uh_test_nan NaN$/m);
  assert.doesNotMatch(body, / Nan$/m);
  // the process's own figures are there too (prom-client's defaults)
  assert.match(body, /^process_resident_memory_bytes \d+/m);
});
