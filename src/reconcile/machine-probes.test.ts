/**
 * ReadinessProbes with a port probe the test answers (real probes of real
 * guests: test/vm/). When a boot's probe starts, and that it runs once.
 */
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';
import { test } from 'node:test';
import { ReadinessProbes } from './machine-probes.js';

/** Probes that wait until the test opens their port; what was probed, and what the controller was told. */
function harness() {
  const tries: string[] = [];
  const open = new Map<string, () => void>();
  const listening: string[] = [];
  const probes = new ReadinessProbes(
    (ip, port, signal) =>
      new Promise<void>((resolve, reject) => {
        tries.push(`${ip}:${port}`);
        open.set(`${ip}:${port}`, resolve);
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      }),
    (id) => void listening.push(id),
  );
  const openPort = async (key: string) => {
    open.get(key)!();
    await tick();
  };
  return { probes, tries, listening, openPort };
}

test('an expected probe starts when the guest is ready, before anything else runs, and only once', async () => {
  const h = harness();
  h.probes.expect('a', '10.0.0.2', [8080]);
  assert.deepEqual(h.tries, [], 'nothing is probed before the guest is ready');
  h.probes.ready('a');
  assert.deepEqual(h.tries, ['10.0.0.2:8080'], 'started in the same turn as the ready mark');
  // the controller's turn for the mark comes later and asks again: no second probe
  h.probes.start('a', '10.0.0.2', [8080]);
  h.probes.ready('a');
  await h.openPort('10.0.0.2:8080');
  assert.deepEqual(h.listening, ['a']);
  h.probes.start('a', '10.0.0.2', [8080]);
  await tick();
  assert.deepEqual(h.tries, ['10.0.0.2:8080'], 'done for this boot: not probed again');
  assert.deepEqual(h.listening, ['a']);
});

test('a VM whose boot was not seen here (adopted) is probed by start; ready without expect does nothing', async () => {
  const h = harness();
  h.probes.ready('b');
  assert.deepEqual(h.tries, []);
  h.probes.start('b', '10.0.0.3', [80, 443]);
  assert.deepEqual(h.tries, ['10.0.0.3:80', '10.0.0.3:443']);
  await h.openPort('10.0.0.3:80');
  assert.deepEqual(h.listening, [], 'every port must accept');
  await h.openPort('10.0.0.3:443');
  assert.deepEqual(h.listening, ['b']);
});

test('a VM that ends stops its probe; the next boot is probed again', async () => {
  const h = harness();
  h.probes.expect('c', '10.0.0.4', [8080]);
  h.probes.ready('c');
  h.probes.end('c');
  await tick();
  assert.deepEqual(h.listening, [], 'an ended probe tells nothing');
  h.probes.expect('c', '10.0.0.4', [8080]);
  h.probes.ready('c');
  assert.equal(h.tries.length, 2, 'the new boot has its own probe');
  await h.openPort('10.0.0.4:8080');
  assert.deepEqual(h.listening, ['c']);
});

test('a boot without ready ports expects no probe; endAll aborts every one', async () => {
  const h = harness();
  h.probes.expect('d', '10.0.0.5', []);
  h.probes.ready('d');
  assert.deepEqual(h.tries, []);
  h.probes.expect('e', '10.0.0.6', [8080]);
  h.probes.ready('e');
  h.probes.endAll();
  await tick();
  assert.deepEqual(h.listening, []);
});

test('a restore running once resumed (gate false): its ports are connected to at ready, and nobody is told', async () => {
  const h = harness();
  h.probes.expect('f', '10.0.0.7', [80, 8080], false);
  assert.deepEqual(h.tries, []);
  h.probes.ready('f');
  assert.deepEqual(h.tries, ['10.0.0.7:80', '10.0.0.7:8080'], 'touched in the same turn as the ready mark');
  await h.openPort('10.0.0.7:80');
  await h.openPort('10.0.0.7:8080');
  assert.deepEqual(h.listening, [], 'the instance is running already: no listening mark');
  // the VM ends while a touch is still open: it is aborted with the rest
  h.probes.expect('g', '10.0.0.8', [8080], false);
  h.probes.ready('g');
  h.probes.end('g');
  await tick();
  assert.deepEqual(h.listening, []);
});
