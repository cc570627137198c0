/**
 * The leak check of the VM suites catches a leak: a process that looks like
 * a QEMU of a suite's data dir (`qemu-system-x86_64` as its name, the dir in
 * its command line) and outlives the grace period makes `assertNoVmLeft`
 * fail, naming it, and is killed only after the check looked.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { alive, assertNoVmLeft, qemuProcs } from '../helpers/vm.js';

/** A process named like QEMU (argv[0]) with `mark` in its command line, as a VM's data dir is; it lives `ms`. */
const fakeVm = (ms: number, mark: string) =>
  spawn(process.execPath, ['-e', `setTimeout(() => {}, ${ms})`, mark], {
    argv0: 'qemu-system-x86_64',
    stdio: 'ignore',
  });

test('a VM left running fails the suite, and is killed afterwards', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'uh-leak-'));
  const fake = fakeVm(60_000, `${dir}/instances/x/serial.raw`);
  try {
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(qemuProcs([dir]).length, 1, 'the fake VM is seen as one');
    await assert.rejects(assertNoVmLeft([dir], 500), (e: Error) => {
      assert.match(e.message, /a VM outlived its instance/);
      assert.match(e.message, new RegExp(`pid ${fake.pid}: qemu-system-x86_64`));
      return true;
    });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(alive(fake.pid!), false, 'killed after the check');
  } finally {
    fake.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a VM that ends within the grace period is no leak', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'uh-leak-'));
  const fake = fakeVm(300, dir);
  try {
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(qemuProcs([dir]).length, 1);
    await assertNoVmLeft([dir], 5000);
  } finally {
    fake.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});
