/**
 * Tests that need a part of the machine (root, QEMU, the test images, the
 * Unikraft kernels, pebble, HAProxy, PostgreSQL, cgroup controllers ...) skip
 * with the reason when it is missing: `{ skip: requirePart(missing) }`. The
 * reason is printed with the skip. With `UNIHOST_REQUIRE_ALL=1` (CI sets it
 * in `.ci/run`) a missing part is a failure instead: a run cannot pass by
 * skipping what it was meant to test.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';

export const requireAll = (): boolean => process.env.UNIHOST_REQUIRE_ALL === '1';

/** `missing`: why the part is not there (falsy when it is). Returns the `skip` option of the tests that need it. */
export function requirePart(missing: string | false | undefined | null): string | false {
  if (!missing) return false;
  if (requireAll()) {
    // registered where the skipped tests are: the run fails, naming what is missing
    test(`required part missing: ${missing}`, () =>
      assert.fail(`UNIHOST_REQUIRE_ALL=1, and a part these tests need is missing: ${missing}`));
  }
  return missing;
}

/** Whether `cmd` is on the PATH (a part a test needs: ip, nft ...). */
export function hasCommand(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
