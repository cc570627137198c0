/**
 * One real boot through the official JS SDK: create with `timeout_s` waits
 * for a real QEMU guest, whose log and metrics (the VM process's RSS and CPU
 * time, its boot time) the SDK then reads. The API-level SDK test
 * (test/api/sdk.test.ts) covers every other call with simulated machines.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { UnikraftCloud } from '@unikraft/cloud';
import { defaultControllers } from '../../src/controllers.js';
import { importGuestImages } from '../../src/images/guest.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { assertNoVmLeft, guestOut, poll } from '../helpers/vm.js';

let h: Harness;
let ukc: UnikraftCloud;
let uuid = '';

before(async () => {
  const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' });
  h = await startHarness({ machines: { accel: 'tcg' }, network: { enabled: false } }, (s) =>
    defaultControllers(s, log),
  );
  await importGuestImages(h.daemon.services.images, guestOut());
  ukc = new UnikraftCloud({ token: await h.user('sdk'), metro: h.url, proxyFromEnv: false });
});

after(async () => {
  if (!h) return;
  const dataDir = h.dataDir;
  try {
    if (uuid) await ukc.instances.delete([{ uuid }]).catch(() => undefined);
    await assertNoVmLeft([dataDir, uuid]);
  } finally {
    await h.close();
  }
});

test('create waits for a real boot; logs and metrics of the running VM; stop brings them to 0', async () => {
  const made = await ukc.instances.create({ image: 'echo:latest', name: 'real', autostart: true, timeout_s: 180 });
  uuid = made.uuid;
  assert.equal(made.state, 'running');

  await poll(
    'the guest printed its args',
    async () => {
      const l = await ukc.instances.logs({ uuid }, { offset: 0, limit: 16383 });
      return Buffer.from(l.output ?? '', 'base64')
        .toString('utf8')
        .includes('hello');
    },
    60_000,
    250,
  );

  const m = await ukc.instances.metrics({ uuid });
  assert.ok(m.rss_bytes > 1 << 20, `rss_bytes ${m.rss_bytes}`);
  assert.ok(m.cpu_time_ms > 0, `cpu_time_ms ${m.cpu_time_ms}`);
  assert.ok(m.boot_time_us > 0, `boot_time_us ${m.boot_time_us}`);

  await ukc.instances.stop([{ uuid }]);
  await ukc.instances.wait({ uuid }, { state: 'stopped', timeoutSeconds: 60 });
  const after = await ukc.instances.metrics({ uuid });
  assert.equal(after.rss_bytes, 0);
  assert.equal(after.cpu_time_ms, 0);
  assert.equal(after.boot_time_us, m.boot_time_us, 'the last boot time stays');
});
