/**
 * The web console's pure logic, outside a browser: the spec's stop reason and
 * stop code tables in words, and the create form refusing what the API
 * refuses (the same rules) and building the request body the API takes.
 * test/vm/console.test.ts drives the console itself in Chromium.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { age, bytes, micros, parseEnv, stopCode, stopReason } from '../../web/src/decode.js';
import { bodyOf, EMPTY, validate } from '../../web/src/create-form.js';

test('stop reasons: the spec table values in its words, other values by their bits', () => {
  assert.equal(stopReason(28).summary, 'Forced shutdown by the user.');
  assert.equal(stopReason(15).summary, 'Regular shutdown by the user: the application and the kernel exited.');
  assert.equal(stopReason(1).summary, 'Likely a fatal crash: the stop code tells the cause.');
  assert.equal(stopReason(0).summary, 'Unknown reason.');
  assert.deepEqual(stopReason(28).bits, ['F (forced stop)', 'U (stopped by the user)', 'P (stopped by the platform)']);
  // 6 = P + A, not in the table: said by its bits
  assert.equal(stopReason(6).summary, 'Stopped by the platform, the application exited.');
});

test('stop codes: reason, init level, shutdown bit and errno from the 32-bit layout', () => {
  assert.deepEqual(stopCode(0), {
    summary: 'Clean shutdown.',
    crash: false,
    parts: ['OK: clean shutdown', 'in init or shutdown phase 0'],
  });
  // crash-abort: EXP while the application ran (initlvl 127)
  const exp = stopCode((127 << 8) | 1);
  assert.equal(exp.crash, true);
  assert.equal(exp.summary, 'Crash: invalid state detected, execution stopped to prevent data corruption.');
  assert.deepEqual(exp.parts.slice(1), ['while the application was running']);
  const pf = stopCode((14 << 16) | (1 << 15) | (3 << 8) | 4);
  assert.deepEqual(pf.parts, [
    'PGFAULT: page fault',
    'in init or shutdown phase 3',
    'during shutdown',
    'errno 14 (EFAULT)',
  ]);
  assert.match(stopCode(200).parts[0]!, /reason 200: unknown reason/);
});

test('sizes, durations and ages read as words', () => {
  assert.equal(bytes(512), '512 B');
  assert.equal(bytes(1536), '1.5 KiB');
  assert.equal(bytes(300 * 1048576), '300 MiB');
  assert.equal(micros(250), '250 µs');
  assert.equal(micros(2500), '2.5 ms');
  assert.equal(micros(2_500_000), '2.50 s');
  const now = Date.parse('2026-01-01T01:00:00Z');
  assert.equal(age('2026-01-01T00:59:30Z', now), '30 s');
  assert.equal(age('2026-01-01T00:00:00Z', now), '1 h');
});

test('environment lines: KEY=VALUE, comments skipped, a bad line named', () => {
  assert.deepEqual(parseEnv('A=1\n# note\n\nB=x=y\n'), { env: { A: '1', B: 'x=y' } });
  assert.deepEqual(parseEnv('A=1\nNOPE'), { error: "environment line 2: 'NOPE' needs '=VALUE'" });
  assert.match((parseEnv('1X=2') as { error: string }).error, /not a variable name/);
});

test('the create form refuses what the API refuses, naming the field', () => {
  const ok = { ...EMPTY, image: 'nginx:latest' };
  assert.deepEqual(validate(ok), {});
  assert.match(validate({ ...EMPTY }).image!, /Choose an image/);
  assert.match(validate({ ...ok, name: 'Bad_Name' }).name!, /contains '_'/);
  assert.match(validate({ ...ok, name: '9lives' }).name!, /labels must start with a letter/);
  assert.match(validate({ ...ok, memory: '0' }).memory!, /at least 1/);
  const port = { port: '8080', destination: '', tls: false, http: true, redirect: false };
  // the API's port rule 4, in the API's words
  assert.match(validate({ ...ok, ports: [port] }).ports!, /port 8080: port rule 4/);
  assert.match(validate({ ...ok, s2z: 'on' }).s2z!, /needs a published port/);
  assert.match(validate({ ...ok, replicas: '65' }).replicas!, /0 to 64/);
});

test('the create body: only what was set, in the API form', () => {
  assert.deepEqual(bodyOf({ ...EMPTY, image: 'nginx:latest' }), {
    image: 'nginx:latest',
    memory_mb: 128,
    autostart: true,
  });
  const b = bodyOf({
    ...EMPTY,
    image: 'c-http:latest',
    name: 'web',
    memory: '16',
    env: 'A=1',
    args: '-v',
    ports: [{ port: '443', destination: '8080', tls: true, http: true, redirect: false }],
    domains: 'shop',
    restart: 'on-failure',
    s2z: 'on',
    stateful: true,
    cooldown: '500',
  });
  assert.deepEqual(b, {
    image: 'c-http:latest',
    memory_mb: 16,
    autostart: true,
    name: 'web',
    args: '-v',
    env: { A: '1' },
    restart_policy: 'on-failure',
    service_group: {
      services: [{ port: 443, destination_port: 8080, handlers: ['tls', 'http'] }],
      domains: [{ name: 'shop' }],
    },
    scale_to_zero: { policy: 'on', cooldown_time_ms: 500, stateful: true },
  });
});
