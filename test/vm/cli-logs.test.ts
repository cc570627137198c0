/**
 * `unihost instance logs -f` following a real booting guest: the CLI runs as
 * a child process against a daemon with the real QEMU controllers, started
 * right after create (no wait), and ends with exit 0 once the instance stops.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import pino from 'pino';
import { defaultControllers } from '../../src/controllers.js';
import { importGuestImages } from '../../src/images/guest.js';
import { runCli, spawnCli, untilOutput } from '../helpers/cli.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { assertNoVmLeft, guestOut } from '../helpers/vm.js';

let h: Harness;
let env: Record<string, string>;

before(async () => {
  const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' });
  h = await startHarness({ machines: { accel: 'tcg' }, network: { enabled: false } }, (s) =>
    defaultControllers(s, log),
  );
  await importGuestImages(h.daemon.services.images, guestOut());
  env = { UKC_METRO: h.url, UKC_TOKEN: await h.user('cli') };
});

after(async () => {
  if (!h) return;
  const dataDir = h.dataDir;
  try {
    await runCli(['instance', 'delete', 'talk'], env).catch(() => undefined);
    await assertNoVmLeft([dataDir]);
  } finally {
    await h.close();
  }
});

test('logs -f started right after create prints the booting guest output and exits 0 when it stops', async () => {
  const c = await runCli(
    ['instance', 'create', '-n', 'talk', '--start', '-w', '0', 'echo:latest', '--', 'cli-follow-marker'],
    env,
  );
  assert.equal(c.code, 0, c.stderr);
  // -w 0: create returns without waiting for the boot, so logs -f sees the guest come up
  assert.doesNotMatch(c.stdout, /\brunning\b/, c.stdout);
  const p = spawnCli(['instance', 'logs', '-f', '--interval', '200ms', 'talk'], env);
  let stderr = '';
  p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  try {
    await untilOutput(p, /cli-follow-marker/, 120_000);
    const closed = once(p, 'close');
    const stop = await runCli(['instance', 'stop', 'talk'], env);
    assert.equal(stop.code, 0, stop.stderr);
    const [code] = await closed;
    assert.equal(code, 0, stderr);
    assert.equal(stderr, '');
  } finally {
    if (p.exitCode === null) p.kill();
  }
});
