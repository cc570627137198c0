/**
 * The web console as the daemon serves it (docs/console.md): the page to a
 * browser at `/` with a strict Content-Security-Policy and no caching, its
 * hashed assets with a year's cache and no token, the API's own answers
 * unchanged for every other client. The console's behaviour in a browser is
 * test/vm/console.test.ts.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { request } from 'undici';
import { CONSOLE_DIR } from '../../src/api/console.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { requirePart } from '../helpers/require.js';
import { simMachines } from '../helpers/sim-machines.js';

const built = existsSync(`${CONSOLE_DIR}index.html`);
const skip = requirePart(!built && 'the web console is not built (npm run build:web)');

describe('web console files', { skip }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
  });
  after(async () => h?.close());

  const get = (path: string, headers: Record<string, string> = {}) => request(`${h.url}${path}`, { headers });

  test('a browser gets the page at / without a token, with a strict CSP and revalidation', async () => {
    const r = await get('/', { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' });
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /^text\/html/);
    assert.equal(r.headers['cache-control'], 'no-cache');
    const csp = String(r.headers['content-security-policy']);
    assert.match(csp, /default-src 'self'/);
    assert.match(csp, /script-src 'self'(;|$)/, 'no inline script, no other origin');
    assert.match(csp, /frame-ancestors 'none'/);
    assert.equal(r.headers['x-content-type-options'], 'nosniff');
    const html = await r.body.text();
    assert.match(html, /<div id="app">/);
    assert.doesNotMatch(html, /<script>(?!<\/script>)/, 'no inline script in the page');
    assert.doesNotMatch(html, /https?:\/\//, 'nothing from another origin: works offline');
  });

  test('an API client still gets the JSON greeting at /, and a token is still required elsewhere', async () => {
    const r = await get('/');
    assert.equal(r.statusCode, 401, 'without a token');
    await r.body.dump();
    const t = await h.user('c');
    const ok = await h.call('GET', '/', t);
    assert.equal(ok.status, 200);
    assert.equal(ok.body.message, 'unihost API v1');
    const api = await get('/v1/instances', { accept: 'text/html' });
    assert.equal(api.statusCode, 401, 'the page is public, the data is not');
    await api.body.dump();
  });

  test('hashed assets: no token, a year immutable, ETag; a missing one is a 404 in the API envelope', async () => {
    const files = readdirSync(`${CONSOLE_DIR}assets`);
    const js = files.find((f) => f.endsWith('.js'));
    assert.ok(js, `a script in ${files.join(', ')}`);
    const r = await get(`/assets/${js}`);
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['content-type']), /javascript/);
    assert.match(String(r.headers['cache-control']), /max-age=31536000/);
    assert.match(String(r.headers['cache-control']), /immutable/);
    assert.ok(r.headers.etag, 'an ETag');
    await r.body.dump();
    const miss = await get('/assets/nope-1234.js');
    assert.equal(miss.statusCode, 404);
    assert.equal(((await miss.body.json()) as { status: string }).status, 'error');
    const up = await get('/assets/..%2f..%2fpackage.json');
    assert.equal(up.statusCode, 404, 'no path out of the assets');
    await up.body.dump();
    const icon = await get('/favicon.svg');
    assert.equal(icon.statusCode, 200);
    await icon.body.dump();
  });
});
