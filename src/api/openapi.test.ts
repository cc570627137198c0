import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ERROR_CODES } from '../errors.js';
import type { EndpointDef } from './endpoint.js';
import { buildOpenApi } from './openapi.js';
import { ENDPOINTS } from './routes/index.js';

const doc = buildOpenApi(ENDPOINTS as EndpointDef[]) as {
  paths: Record<string, Record<string, Record<string, unknown>>>;
};

test('the committed OpenAPI document is the generated one', () => {
  const committed = readFileSync(new URL('../../docs/openapi.json', import.meta.url), 'utf8');
  assert.equal(committed, JSON.stringify(doc, null, 2) + '\n', 'docs/openapi.json is stale: run `npm run openapi`');
});

test('every endpoint and path of the table is in the document with a request schema', () => {
  for (const def of ENDPOINTS as EndpointDef[]) {
    for (const url of [def.path, def.localPath].filter((u): u is string => !!u)) {
      const p = url.replace(/:([a-z_]+)/g, '{$1}');
      const op = doc.paths[p]?.[def.method.toLowerCase()];
      assert.ok(op, `${def.method} ${p} missing`);
      assert.ok(op.requestBody, `${def.method} ${p} has no request body schema`);
      assert.ok((op.responses as Record<string, unknown>)['200'], `${def.method} ${p} has no response`);
    }
  }
});

test('the document covers every category of the spec', () => {
  const cats = new Set(Object.keys(doc.paths).map((p) => p.split('/')[2]));
  for (const c of ['services', 'instances', 'volumes', 'certificates', 'images', 'users']) assert.ok(cats.has(c), c);
  assert.ok(doc.paths['/v1/services/{uuid}/autoscale/policies'], 'autoscale policies');
});

test('every error code is documented in docs/errors.md', () => {
  const md = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
  for (const code of Object.keys(ERROR_CODES))
    assert.ok(md.includes(`\`${code}\``), `${code} missing from docs/errors.md`);
});
