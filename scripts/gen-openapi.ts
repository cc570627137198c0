// Writes docs/openapi.json from the endpoint table; `--check` fails if the file is stale.
import { readFileSync, writeFileSync } from 'node:fs';
import { buildOpenApi } from '../src/api/openapi.js';
import { ENDPOINTS } from '../src/api/routes/index.js';
import type { EndpointDef } from '../src/api/endpoint.js';

const file = new URL('../docs/openapi.json', import.meta.url);
const text = JSON.stringify(buildOpenApi(ENDPOINTS as EndpointDef[]), null, 2) + '\n';
if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(file, 'utf8');
  } catch {
    /* missing counts as stale */
  }
  if (current !== text) {
    console.error('docs/openapi.json is out of date: run `npm run openapi`');
    process.exit(1);
  }
  console.log('docs/openapi.json is up to date');
} else {
  writeFileSync(file, text);
  console.log('wrote docs/openapi.json');
}
