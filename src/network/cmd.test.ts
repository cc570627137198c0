import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { CommandError, hostRunner, runCommand } from './cmd.js';

/** Running, as opposed to gone or a zombie waiting for a reaper (init may be slow to reap in containers). */
const alive = (pid: number): boolean => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

test('a hung command is killed at its deadline with its children, and the error names it', async () => {
  // The shell starts a background sleep that holds the output pipe: only a group kill ends both.
  const argv = ['sh', '-c', 'sleep 300 & echo $!; wait'];
  const e = await runCommand(argv, { timeoutMs: 300 }).then(
    () => assert.fail('the command should have timed out'),
    (x: unknown) => x,
  );
  assert.ok(e instanceof CommandError);
  assert.equal(e.timeoutMs, 300);
  assert.match(e.message, /^sh -c sleep 300 & echo \$!; wait timed out after 300 ms/);
  const child = Number(e.stdout.trim());
  assert.ok(child > 0, `no pid in ${JSON.stringify(e.stdout)}`);
  for (let i = 0; i < 100 && alive(child); i++) await sleep(20);
  assert.equal(alive(child), false, `the background sleep ${child} survived`);
});

test('the network runner has a deadline too', async () => {
  await assert.rejects(hostRunner(undefined, 200)(['sleep', '300']), /sleep 300 timed out after 200 ms/);
});

test('exit status, output and input work as before', async () => {
  assert.equal(await hostRunner()(['cat'], 'hello'), 'hello');
  await assert.rejects(hostRunner()(['sh', '-c', 'echo oops >&2; exit 3']), /failed \(3\): oops/);
  await assert.rejects(hostRunner()(['/nonexistent-command']), CommandError);
});
