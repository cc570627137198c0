import { after, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bootProbe, PROBE_EXIT_STATUS, probeAccel, probeKernel, resetAccelCache, slowBound } from './accel.js';

const dir = mkdtempSync(join(tmpdir(), 'unihost-accel-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));
beforeEach(() => resetAccelCache());

/** A stand-in KVM device for the fake QEMUs: the probe checks only that it can be opened read-write. */
const kvmDevice = join(dir, 'kvm');
writeFileSync(kvmDevice, '');

/**
 * A stand-in QEMU: records each call's accelerator, then exits 99 (the probe
 * status) under TCG and does `kvm` (a shell snippet) under KVM. `exec` makes
 * the kill at the timeout hit the sleeping process itself, not a shell.
 */
function fakeQemu(name: string, kvm: string): { bin: string; calls: () => string[] } {
  const bin = join(dir, name);
  const log = join(dir, `${name}.calls`);
  writeFileSync(log, '');
  writeFileSync(
    bin,
    `#!/bin/sh\naccel=$(echo "$@" | sed 's/.*-accel \\([a-z]*\\).*/\\1/')\necho "$accel" >> ${log}\n` +
      `if [ "$accel" = tcg ]; then exit ${PROBE_EXIT_STATUS}; fi\n${kvm}\n`,
  );
  chmodSync(bin, 0o755);
  return { bin, calls: () => readFileSync(log, 'utf8').split('\n').filter(Boolean) };
}

test('the probe kernel is a valid Multiboot a.out-kludge image', () => {
  const k = probeKernel();
  const magic = k.readUInt32LE(0);
  const flags = k.readUInt32LE(4);
  assert.equal(magic, 0x1badb002);
  assert.equal(flags, 0x00010000);
  assert.equal((magic + flags + k.readUInt32LE(8)) % 2 ** 32, 0, 'checksum');
  const [headerAddr, loadAddr, loadEnd, bssEnd, entry] = [12, 16, 20, 24, 28].map((o) => k.readUInt32LE(o)) as [
    number,
    number,
    number,
    number,
    number,
  ];
  assert.equal(headerAddr, loadAddr);
  assert.equal(loadEnd - loadAddr, k.length);
  assert.ok(bssEnd >= loadEnd);
  assert.equal(k[entry - loadAddr], 0xfa, 'entry: cli');
});

test('the probe code is probe-kernel.S assembled (where binutils are)', (t) => {
  const src = join(import.meta.dirname, 'probe-kernel.S');
  const as = spawnSync('as', ['--version']);
  if (as.status !== 0) return t.skip('no GNU as: binutils are not installed');
  const obj = join(dir, 'p.o');
  const bin = join(dir, 'p.bin');
  assert.equal(spawnSync('as', ['--64', '-o', obj, src]).status, 0);
  assert.equal(
    spawnSync('ld', ['-m', 'elf_x86_64', '-Ttext=0x100020', '--oformat', 'binary', '-o', bin, obj]).status,
    0,
  );
  const code = readFileSync(bin);
  const k = probeKernel();
  assert.deepEqual(k.subarray(32, 32 + code.length), code);
  assert.ok(
    k.subarray(32 + code.length).every((b) => b === 0),
    'zero padding after the code',
  );
});

test('the probe kernel boots under TCG and exits through isa-debug-exit', async () => {
  const r = await bootProbe('tcg', { timeoutMs: 20_000 });
  assert.equal(r.ok, true, r.reason);
});

test('a QEMU that cannot run fails the probe with the reason', async () => {
  const r = await bootProbe('tcg', { qemu: join(dir, 'no-such-qemu') });
  assert.equal(r.ok, false);
  assert.match(r.reason, /cannot run .*no-such-qemu/);
});

test("probeAccel('tcg') does not probe", async () => {
  const fake = fakeQemu('qemu-tcg-only', 'exit 1');
  const logs: string[] = [];
  assert.equal(await probeAccel('tcg', { qemu: fake.bin, log: (m) => logs.push(m) }), 'tcg');
  assert.deepEqual(fake.calls(), []);
  assert.match(logs.join('\n'), /tcg/);
});

test("probeAccel('auto') uses KVM when it boots, probes once per process", async () => {
  const fake = fakeQemu('qemu-good-kvm', `exit ${PROBE_EXIT_STATUS}`);
  const logs: string[] = [];
  assert.equal(await probeAccel('auto', { qemu: fake.bin, kvmDevice, log: (m) => logs.push(m) }), 'kvm');
  assert.equal(await probeAccel('kvm', { qemu: fake.bin, kvmDevice }), 'kvm');
  assert.equal(await probeAccel('auto', { qemu: fake.bin, kvmDevice }), 'kvm');
  assert.deepEqual(fake.calls(), ['tcg', 'kvm'], 'one TCG baseline and one KVM boot, then cached');
  assert.match(logs[0]!, /^accel: kvm \(probe guest booted under kvm/);
});

test("probeAccel('auto') falls back to TCG when KVM fails or only emulates; 'kvm' throws", async () => {
  const broken = fakeQemu('qemu-broken-kvm', 'echo "KVM internal error. Suberror: 1" >&2; exit 1');
  const logs: string[] = [];
  assert.equal(await probeAccel('auto', { qemu: broken.bin, kvmDevice, log: (m) => logs.push(m) }), 'tcg');
  assert.match(logs[0]!, /^accel: tcg \(KVM unusable: QEMU exited with 1 \(KVM internal error/);
  await assert.rejects(
    probeAccel('kvm', { qemu: broken.bin, kvmDevice }),
    /KVM requested but unusable: .*KVM internal error/,
  );

  // Boots, but far slower than TCG (emulated KVM): killed at the slowness bound.
  const slow = fakeQemu('qemu-slow-kvm', `exec sleep ${Math.ceil(slowBound(0) / 1000) + 5}`);
  assert.equal(
    await probeAccel('auto', { qemu: slow.bin, kvmDevice, log: (m) => logs.push(m), timeoutMs: 60_000 }),
    'tcg',
  );
  assert.match(logs[1]!, /did not finish under kvm within \d+ ms; the same guest boots under TCG in \d+ ms/);
});

test("probeAccel('auto') without a usable QEMU or /dev/kvm picks TCG", async () => {
  const logs: string[] = [];
  const mode = await probeAccel('auto', { qemu: join(dir, 'no-such-qemu'), log: (m) => logs.push(m) });
  assert.equal(mode, 'tcg');
  assert.match(logs[0]!, /^accel: tcg \(KVM unusable: /);
});

test("probeAccel('auto') without the KVM device picks TCG without booting anything, naming the device", async () => {
  const fake = fakeQemu('qemu-no-device', `exit ${PROBE_EXIT_STATUS}`);
  const logs: string[] = [];
  const missing = join(dir, 'no-such-kvm');
  assert.equal(await probeAccel('auto', { qemu: fake.bin, kvmDevice: missing, log: (m) => logs.push(m) }), 'tcg');
  assert.deepEqual(fake.calls(), []);
  assert.ok(logs[0]!.includes(`${missing} is missing or not accessible`), logs[0]);
});

test("probeAccel('auto') with the real QEMU returns a valid choice and says why", async (t) => {
  const logs: string[] = [];
  const mode = await probeAccel('auto', { log: (m) => logs.push(m) });
  assert.ok(mode === 'kvm' || mode === 'tcg');
  assert.equal(logs.length, 1);
  assert.match(logs[0]!, new RegExp(`^accel: ${mode} \\(`));
  t.diagnostic(`real probe on this host: ${logs[0]}`);
});
