/**
 * Real QEMU (TCG) through the real daemon over HTTP: boot, logs, every stop
 * path a guest can produce, restart policies, deletion and bad images. Boots
 * are few and shared: most instances are created in one batch and boot side
 * by side; the tests then act on them one by one.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pino from 'pino';
import { defaultControllers } from '../../src/controllers.js';
import { importGuestImages } from '../../src/images/guest.js';
import type { InstanceRec } from '../../src/store/types.js';
import { startHarness, type Harness, type Reply } from '../helpers/harness.js';
import { assertNoVmLeft, guestOut, poll, qemuProcs } from '../helpers/vm.js';

type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any

let h: Harness;
let tok: string; // a developer
/** instance name → uuid */
const ids: Record<string, string> = {};
const BOOT_MS = 180_000;

before(async () => {
  const log = pino({ level: process.env.UNIHOST_TEST_LOG ?? 'silent' });
  h = await startHarness({ machines: { accel: 'tcg' }, network: { enabled: false } }, (s) =>
    defaultControllers(s, log),
  );
  await importGuestImages(h.daemon.services.images, guestOut());
  tok = await h.user('dev', true);
});

after(async () => {
  // Delete what is left (a running VM is killed), then check that nothing of ours runs any more.
  if (!h) return;
  const list = await h.call('GET', '/v1/instances/list', tok);
  for (const i of list.body?.data?.instances ?? []) await h.call('DELETE', `/v1/instances/${i.uuid}`, tok);
  const dataDir = h.dataDir;
  try {
    await assertNoVmLeft([dataDir, ...Object.values(ids)]);
  } finally {
    await h.close();
  }
});

const call = (m: string, p: string, body?: unknown) => h.call(m, p, tok, body);
const entries = (r: Reply): Any[] => {
  assert.equal(r.status, 200, r.text);
  return r.body.data.instances;
};
const ok = (r: Reply): Any => {
  const [e] = entries(r);
  assert.equal(e.status, 'success', r.text);
  return e;
};
const get = async (name: string): Promise<Any> => ok(await call('GET', `/v1/instances/${ids[name]}`));
const rec = async (name: string): Promise<InstanceRec | undefined> =>
  h.daemon.store.read((tx) => tx.instances.getAny(ids[name]!));
const waitState = async (name: string, state: string, timeout_ms = BOOT_MS): Promise<Any> =>
  ok(await call('GET', '/v1/instances/wait', { uuid: ids[name], state, timeout_ms }));
const log = async (name: string): Promise<string> => {
  const e = ok(await call('GET', '/v1/instances/log', { uuid: ids[name], offset: 0, limit: 16383 }));
  return Buffer.from(e.output, 'base64').toString('utf8');
};
const logHas = (name: string, re: RegExp) =>
  poll(`log of ${name} matches ${re}`, async () => re.test(await log(name)), 60_000, 250);
/** Stop fields as the API shows them. */
const stopFields = (g: Any) => ({
  state: g.state,
  stop_reason: g.stop_reason,
  exit_code: g.exit_code,
  stop_code: g.stop_code,
});

test('one batch: autostart + wait_timeout_ms → running with boot_time_us; the rest boots alongside', async () => {
  const waitRunning = { autostart: true, wait_timeout_ms: BOOT_MS };
  const t0 = Date.now();
  const r = await call('POST', '/v1/instances', [
    {
      name: 'graceful',
      image: 'echo:latest',
      args: ['hi', 'big world'],
      env: { GREETING: 'hello world' },
      ...waitRunning,
    },
    { name: 'forced', image: 'echo:latest', ...waitRunning },
    { name: 'stubborn', image: 'echo:latest', env: { IGNORE_SIGTERM: '1' }, ...waitRunning },
    { name: 'doomed', image: 'echo:latest', ...waitRunning },
    { name: 'exit3', image: 'exit:latest', args: ['3'], autostart: true },
    { name: 'panic', image: 'panic:latest', autostart: true },
    { name: 'always', image: 'exit:latest', restart_policy: 'always', autostart: true },
    { name: 'onfail', image: 'panic:latest', restart_policy: 'on-failure', autostart: true },
  ]);
  const wall = Date.now() - t0;
  const es = entries(r);
  assert.equal(es.length, 8, r.text);
  for (const e of es) {
    assert.equal(e.status, 'success', r.text);
    ids[e.name] = e.uuid;
  }
  const boots: number[] = [];
  for (const e of es.slice(0, 4)) {
    assert.equal(e.state, 'running', `${e.name}: ${r.text}`);
    assert.ok(Number.isInteger(e.boot_time_us) && e.boot_time_us > 0, `${e.name} boot_time_us`);
    boots.push(e.boot_time_us);
  }
  for (const e of es.slice(4)) assert.equal(e.boot_time_us, undefined, 'no wait, no boot time');
  console.log(`# 8 concurrent boots: boot_time_us of the 4 waited ones ${boots.join(', ')}; batch took ${wall} ms`);

  const g = await get('graceful');
  assert.equal(g.state, 'running');
  assert.equal(g.start_count, 1);
  assert.ok(g.started_at);
  assert.equal(g.stopped_at, undefined);
  assert.equal(g.stop_reason, undefined, 'no stop fields while running');
  // developer fields: measured, and in the order the boot passes them
  for (const k of ['vmm_start_time_us', 'vmm_load_time_us', 'vmm_ready_time_us'])
    assert.ok(Number.isInteger(g[k]) && g[k] >= 0, `${k}: ${JSON.stringify(g)}`);
  assert.ok(g.vmm_load_time_us <= g.vmm_ready_time_us, JSON.stringify(g));
  assert.ok(g.vmm_ready_time_us <= g.boot_time_us, JSON.stringify(g));
  const pid = (await rec('graceful'))!.runtime.pid as number;
  assert.equal(qemuProcs([ids.graceful!]).map((p) => p.pid)[0], pid, 'the recorded pid is the VM');
});

test('wait on several ids: each returns when it reaches the state; a timeout is per target', async () => {
  const r = await call('GET', '/v1/instances/wait', {
    ids: [{ uuid: ids.exit3 }, { name: 'panic' }],
    state: 'stopped',
    timeout_ms: BOOT_MS,
  });
  const es = entries(r);
  assert.deepEqual(
    es.map((e: Any) => [e.status, e.name, e.state]),
    [
      ['success', 'exit3', 'stopped'],
      ['success', 'panic', 'stopped'],
    ],
    r.text,
  );
  const mixed = await call('GET', '/v1/instances/wait', {
    ids: [{ uuid: ids.exit3 }, { uuid: ids.doomed }],
    state: 'stopped',
    timeout_ms: 300,
  });
  const [a, b] = entries(mixed);
  assert.equal(mixed.body.status, 'partial_success', mixed.text);
  assert.equal(a.status, 'success');
  assert.equal(b.status, 'error');
  assert.match(b.message, /did not reach state 'stopped'/);
});

test('exit 3 → stop_reason 3, exit_code 3, stop_code 0; policy never: no restart', async () => {
  const g = await get('exit3');
  assert.deepEqual(stopFields(g), { state: 'stopped', stop_reason: 3, exit_code: 3, stop_code: 0 });
  assert.equal(g.restart_count, 0);
  assert.equal(g.start_count, 1);
  assert.ok(g.boot_time_us > 0);
  assert.ok(Date.parse(g.stopped_at) >= Date.parse(g.started_at));
});

test('kernel panic → stop_reason 1, stop_code reason ≠ 0 with initlvl 127; never: no restart', async () => {
  const g = await get('panic');
  assert.equal(g.state, 'stopped');
  assert.equal(g.stop_reason, 1);
  assert.equal(g.exit_code, undefined);
  assert.notEqual(g.stop_code & 0xff, 0, `stop_code ${g.stop_code}`);
  assert.equal((g.stop_code >> 8) & 0x7f, 127, `stop_code ${g.stop_code}`);
  assert.equal(g.stop_code, 32513, 'EXP, initlvl 127 (docs/guest-contract.md)');
  assert.equal(g.restart_count, 0);
  assert.match(await log('panic'), /Kernel panic/);
});

test('restart policy always: an exiting app is restarted', async () => {
  const r = await h.until(async () => {
    const i = await rec('always');
    return i && i.restart_count >= 1 && i.start_count >= 2 ? i : undefined;
  }, BOOT_MS);
  assert.ok(r.restart_attempt >= 1);
  const g = await get('always');
  assert.ok(g.restart_count >= 1 && g.start_count >= 2, JSON.stringify(g));
  assert.ok(g.restart.attempt >= 1, JSON.stringify(g.restart));
  // the log spans the instance's boots
  await logHas('always', /exit: exiting with code 0[^]*exit: exiting with code 0/);
  ok(await call('PUT', `/v1/instances/${ids.always}/stop`, { force: true }));
  const s = await waitState('always', 'stopped', 30_000);
  assert.equal(s.state, 'stopped');
  const after = await get('always');
  assert.equal(after.restart.attempt, 0, 'a manual stop ends the sequence');
  assert.equal(after.restart.next_at, undefined);
});

test('restart policy on-failure: a panicking guest is restarted', async () => {
  await h.until(async () => {
    const i = await rec('onfail');
    return i && i.restart_count >= 1 && i.start_count >= 2 ? i : undefined;
  }, BOOT_MS);
  ok(await call('PUT', `/v1/instances/${ids.onfail}/stop`, { force: true }));
  await waitState('onfail', 'stopped', 30_000);
});

test('log: the args and env the echo app printed', async () => {
  await logHas('graceful', /echo: running/);
  const text = await log('graceful');
  assert.match(text, /echo: argc=2\r?\n/);
  assert.match(text, /echo: argv\[1\]=<hi>/);
  assert.match(text, /echo: argv\[2\]=<big world>/);
  assert.match(text, /echo: env <GREETING=hello world>/);
  assert.match(text, /echo: env <PATH=\/bin>/);
  // the image's default args are dismissed when the instance has args
  assert.doesNotMatch(text, /argv\[\d\]=<hello>/);
  const tail = ok(await call('GET', '/v1/instances/log', { uuid: ids.graceful, offset: -13, limit: 100 }));
  assert.equal(tail.range.end, tail.available.end);
  assert.equal(tail.range.end - tail.range.start + 1, 13);
});

test('graceful stop → 15, exit_code 0, stop_code 0', async () => {
  const r = ok(await call('PUT', `/v1/instances/${ids.graceful}/stop`));
  assert.equal(r.previous_state, 'running');
  await waitState('graceful', 'stopped', 60_000);
  const g = await get('graceful');
  assert.deepEqual(stopFields(g), { state: 'stopped', stop_reason: 15, exit_code: 0, stop_code: 0 });
  assert.ok(g.uptime_ms > 0);
  assert.match(await log('graceful'), /echo: SIGTERM, exiting/);
  assert.deepEqual(qemuProcs([ids.graceful!]), []);
});

test('force stop → 28, no exit_code or stop_code', async () => {
  ok(await call('PUT', `/v1/instances/${ids.forced}/stop`, { force: true }));
  await waitState('forced', 'stopped', 30_000);
  const g = await get('forced');
  assert.deepEqual(stopFields(g), { state: 'stopped', stop_reason: 28, exit_code: undefined, stop_code: undefined });
  assert.deepEqual(qemuProcs([ids.forced!]), []);
});

test('graceful stop of an app that ignores SIGTERM → 13 (killed after the guest stop timeout)', async () => {
  await logHas('stubborn', /echo: running/);
  ok(await call('PUT', `/v1/instances/${ids.stubborn}/stop`));
  await waitState('stubborn', 'stopped', 60_000);
  const g = await get('stubborn');
  assert.deepEqual(stopFields(g), { state: 'stopped', stop_reason: 13, exit_code: undefined, stop_code: 0 });
});

test('delete of a running instance leaves no process and no files', async () => {
  const id = ids.doomed!;
  assert.equal((await get('doomed')).state, 'running');
  assert.equal(qemuProcs([id]).length, 1);
  const dir = h.daemon.services.paths.instance(id);
  assert.ok(existsSync(dir));
  ok(await call('DELETE', `/v1/instances/${id}`));
  await poll('VM and files of a deleted instance gone', () => qemuProcs([id]).length === 0 && !existsSync(dir), 20_000);
  const gone = entries(await call('GET', `/v1/instances/${id}`))[0];
  assert.deepEqual([gone.status, gone.error], ['error', 8]);
});

test('a missing kernel → stopped with a reason and a log line; a corrupt one too; nothing runs', async () => {
  const junk = join(h.dataDir, 'junk-kernel');
  // random bytes, except that the Linux boot header's setup size (byte 0x1f1) says more than the file
  // holds: QEMU then refuses it ("invalid kernel header"). With a small value there (1 file in 32)
  // QEMU loads it as an old zImage and runs the noise, which is a hung VM, not a corrupt kernel.
  const noise = randomBytes(4096);
  noise[0x1f1] = 0xff;
  writeFileSync(junk, noise);
  const services = h.daemon.services;
  const missing = await services.images.importKernel('nokernel:latest', { kernel: junk, machine: 'microvm' });
  await services.images.importKernel('corrupt:latest', { kernel: junk, machine: 'microvm', args: ['other'] });
  // remove the unpacked copy and the layer blob: nothing left to boot from
  rmSync(join(services.paths.images, 'unpacked', missing.digest.slice(7)), { recursive: true, force: true });
  rmSync(missing.boot.kernel, { force: true });
  const blob = (digest: string) => join(services.paths.images, 'blobs', 'sha256', digest.slice(7));
  const manifest = JSON.parse(readFileSync(blob(missing.digest), 'utf8')) as { layers: { digest: string }[] };
  for (const l of manifest.layers) rmSync(blob(l.digest));

  const r = await call('POST', '/v1/instances', [
    { name: 'nokernel', image: 'nokernel:latest', autostart: true, wait_timeout_ms: 60_000 },
    { name: 'corrupt', image: 'corrupt:latest', autostart: true, wait_timeout_ms: 60_000 },
  ]);
  const es = entries(r);
  for (const e of es) {
    assert.equal(e.status, 'success', r.text);
    ids[e.name] = e.uuid;
    assert.equal(e.state, 'stopped', `${e.name}: the wait ends when the boot has failed`);
  }
  for (const name of ['nokernel', 'corrupt']) {
    const g = await get(name);
    assert.equal(g.state, 'stopped');
    assert.equal(g.stop_reason, 4, `${name}: platform-initiated (the platform could not boot it)`);
    assert.equal(g.exit_code, undefined);
    assert.deepEqual(qemuProcs([ids[name]!]), []);
  }
  assert.match(await log('nokernel'), /\[unihost\] the VM could not be started: .+/);
  assert.match(await log('corrupt'), /\[unihost\] the VMM failed: .*(kernel|load)/i);
});
