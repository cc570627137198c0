import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

let h: Harness;
let token: string;

before(async () => {
  h = await startHarness({}, (s) => [simMachines(s)]);
  await h.image('app:latest');
  token = await h.user('cmd');
});
after(async () => h.close());

const count = async () => (await h.call('GET', '/v1/instances', token)).body.data.instances.length as number;

test('an env value with both quote characters is refused, naming the variable; nothing is created', async () => {
  const r = await h.call('POST', '/v1/instances', token, {
    name: 'q',
    image: 'app:latest',
    env: { OK: 'fine', BAD: `it's "quoted"` },
  });
  assert.equal(r.status, 400, r.text);
  assert.match(r.body.message, /parameter 'env': the value of 'BAD' must not contain both ' and " quotes/);
  assert.equal(await count(), 0);
});

test('an env value with a newline is refused, naming the variable', async () => {
  const r = await h.call('POST', '/v1/instances', token, { image: 'app:latest', env: { MULTI: 'a\nb' } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.body.message, /the value of 'MULTI' must not contain newlines/);
});

test('an argument with a NUL character is refused, naming its position', async () => {
  const r = await h.call('POST', '/v1/instances', token, { image: 'app:latest', args: ['ok', 'a\u0000b'] });
  assert.equal(r.status, 400, r.text);
  assert.match(r.body.message, /parameter 'args': argument 1 must not contain newlines or NUL/);
  assert.equal(await count(), 0);
});

test('values with one kind of quote, and arguments with both, are accepted', async () => {
  const r = await h.call('POST', '/v1/instances', token, {
    name: 'fine',
    image: 'app:latest',
    env: { A: `it's`, B: 'say "hi"' },
    args: [`a"b'c`],
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.data.instances[0].status, 'success', r.text);
});
