/**
 * The state boundary in the sources (docs/architecture.md, "Spec, status,
 * placement"): services write the spec, the host's reconcilers the status,
 * and `state` changes only through the state table. The store refuses a
 * field of the wrong half at run time (test/store/contract.test.ts); this
 * checks who calls which writer.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const SRC = join(import.meta.dirname, '../../src');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) return f === 'testing' ? [] : sources(p);
    return p.endsWith('.ts') && !p.endsWith('.test.ts') ? [p] : [];
  });
}

/** Files (relative to src/) that call `.<method>(`. */
function callers(method: string): string[] {
  return sources(SRC)
    .filter((f) => new RegExp(`\\.${method}\\(`).test(readFileSync(f, 'utf8')))
    .map((f) => relative(SRC, f))
    .filter((f) => !f.startsWith('store/'))
    .sort();
}

test('state changes only through the state table', () => {
  assert.deepEqual(callers('setState'), ['domain/instance-states.ts']);
});

test('the status is written by the reconcilers, and by the state table for a manual command', () => {
  const writers = callers('updateStatus');
  assert.ok(writers.length > 0);
  for (const f of writers)
    assert.ok(f.startsWith('reconcile/') || f === 'domain/instance-states.ts', `${f} writes the status`);
});

test('the spec is written by services only', () => {
  const writers = callers('updateSpec');
  assert.ok(writers.length > 0);
  for (const f of writers) assert.ok(f.startsWith('services/'), `${f} writes the spec`);
});
