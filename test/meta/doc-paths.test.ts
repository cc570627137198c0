/**
 * What the docs point at exists: every source or test file path named in
 * README.md and docs/*.md (`src/...`, `test/...`, `bench/...`, `scripts/...`)
 * is a file or directory of the repository, so a claim like "a unit test in
 * src/reconcile/machines.test.ts" cannot go stale when the file moves.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '../..');
const docs = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const PATH = /(?<![\w./-])((?:src|test|bench|scripts|guest)\/[\w./-]*[\w-](?:\.(?:ts|mjs|sh|json|cjs))?)/g;

test('every file path the docs name exists', () => {
  const missing: string[] = [];
  for (const doc of docs) {
    const text = readFileSync(join(ROOT, doc), 'utf8');
    for (const m of text.matchAll(PATH)) {
      const p = m[1]!.replace(/\.$/, '');
      // globs and placeholders (`cli/<noun>/<verb>.ts`, `src/**/*.test.ts`) are not paths
      if (/[*<>]/.test(p) || p.includes('...')) continue;
      // a script or test named without its extension (`bench/gateway`, `test/vm/unikraft`)
      if (!['', '.ts', '.test.ts'].some((ext) => existsSync(join(ROOT, p + ext)))) missing.push(`${doc}: ${p}`);
    }
  }
  assert.deepEqual(missing, []);
});
