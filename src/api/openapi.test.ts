import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ApiErrorNumber, ERROR_CODES } from '../errors.js';
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

test("every error code is in docs/errors.md's table, with its HTTP status and API error number", () => {
  const md = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
  const rows = new Map(
    [...md.matchAll(/^\| `(UH_[A-Z_]+)` \| (\d+) \| (\d+) \(([A-Za-z]+)\) \|/gm)].map((m) => [
      m[1]!,
      { http: Number(m[2]), api: Number(m[3]), name: m[4]! },
    ]),
  );
  for (const [code, info] of Object.entries(ERROR_CODES)) {
    const row = rows.get(code);
    assert.ok(row, `${code} missing from docs/errors.md's table`);
    assert.deepEqual(
      [row.http, row.api, row.name],
      [info.http, info.api, Object.entries(ApiErrorNumber).find(([, n]) => n === info.api)![0]],
      `${code}: the table says HTTP ${row.http}, error ${row.api} (${row.name})`,
    );
  }
  assert.deepEqual(
    [...rows.keys()].filter((c) => !(c in ERROR_CODES)),
    [],
    'codes in the table that no longer exist',
  );
});

test('answers typed: every endpoint names every field of its answer entries (issue 24)', async () => {
  const { Summary } = await import('./schemas/common.js');
  const defs = ENDPOINTS as EndpointDef[];
  const generic = defs.filter((d) => d.response === Summary).map((d) => `${d.method} ${d.path}`);
  assert.deepEqual(generic, [], 'endpoints that name no field of their answer');
  // closed schemas: every field named, nothing else allowed (real answers checked in test/api/responses.test.ts)
  // an endpoint that never answers an entry (the nodes stubs, auth/signin: always refused) has `not: {}`
  const open = (s: { anyOf?: unknown[]; additionalProperties?: unknown; not?: unknown }): boolean =>
    s.anyOf ? s.anyOf.some((x) => open(x as typeof s)) : s.not === undefined && s.additionalProperties !== false;
  const still = defs.filter((d) => open(d.response as never)).map((d) => `${d.method} ${d.path}`);
  assert.deepEqual(still, [], 'endpoints whose answer entries may hold fields their schema does not name');
});
