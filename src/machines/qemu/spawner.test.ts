/** The posix_spawn helper with real processes: what each child gets, how its end is reported, the helper's own end. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { alive } from './procs.js';
import { Spawner, type ChildEnd } from './spawner.js';

const usable = Spawner.usable();
const skip = usable ? false : 'python3 (with posix_spawnp and pidfd_open) is not installed: the driver forks instead';

/** A spawner whose `lost` pids are collected, and a scratch dir; both go after `fn`. */
async function withSpawner(
  fn: (s: Spawner, dir: string, lost: number[], ends: string[]) => Promise<void>,
): Promise<void> {
  const lost: number[] = [];
  const ends: string[] = [];
  const s = new Spawner(
    (pid) => lost.push(pid),
    (why) => ends.push(why),
  );
  const dir = mkdtempSync(join(tmpdir(), 'unihost-spawner-'));
  // an idle helper does not keep a process alive (as the driver's unref'd children do not): the test does
  const keep = setInterval(() => undefined, 1000);
  try {
    await fn(s, dir, lost, ends);
  } finally {
    clearInterval(keep);
    s.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const ended = () => {
  let resolve!: (e: ChildEnd) => void;
  const p = new Promise<ChildEnd>((r) => (resolve = r));
  return { p, onExit: resolve };
};

test(
  'a child gets its stderr file, fd 3, a session of its own and default signals; its exit status is reported',
  { skip },
  () =>
    withSpawner(async (s, dir) => {
      const err = join(dir, 'stderr');
      writeFileSync(err, 'old content that must go');
      const snap = join(dir, 'snap');
      writeFileSync(snap, 'the snapshot bytes');
      const e = ended();
      // prints fd 3, its session id and its ignored-signal mask to stderr, reads stdin (/dev/null: nothing)
      const script = 'cat <&3 >&2; echo >&2; ps -o sid= -p $$ >&2; grep SigIgn /proc/$$/status >&2; cat; exit 7';
      const pid = await s.start(['/bin/sh', '-c', script], { stderr: err, fd3: snap }, e.onExit);
      assert.deepEqual(await e.p, { code: 7, signal: null });
      const [fd3, sid, sigIgn] = readFileSync(err, 'utf8').trim().split('\n');
      assert.equal(fd3, 'the snapshot bytes');
      assert.equal(Number(sid), pid, 'its own session');
      // the helper (python) ignores SIGPIPE and SIGINT; a VMM must not inherit that. (glibc's posix_spawn
      // leaves its own internal signals 32 and 33 ignored (bits 31, 32); glibc sets their handlers up again in the program.)
      const ignored = BigInt(`0x${sigIgn!.split(/\s+/)[1]}`);
      assert.equal(ignored & 0x7fffffffn, 0n, `standard signals ignored: ${sigIgn}`);
    }),
);

test(
  'a child killed by a signal is reported with the signal; many children at once each get their own end',
  { skip },
  () =>
    withSpawner(async (s, dir) => {
      const kids = await Promise.all(
        [0, 1, 2, 3].map(async (k) => {
          const e = ended();
          const pid = await s.start(['sleep', '60'], { stderr: join(dir, `e${k}`) }, e.onExit);
          return { pid, e };
        }),
      );
      assert.equal(new Set(kids.map((k) => k.pid)).size, 4);
      process.kill(kids[2]!.pid, 'SIGKILL');
      assert.deepEqual(await kids[2]!.e.p, { code: null, signal: 'SIGKILL' });
      for (const k of kids) if (k !== kids[2]) process.kill(k.pid, 'SIGTERM');
      for (const k of kids) if (k !== kids[2]) assert.deepEqual(await k.e.p, { code: null, signal: 'SIGTERM' });
    }),
);

test('a program that does not exist is refused with its name and the reason', { skip }, () =>
  withSpawner(async (s, dir) => {
    await assert.rejects(
      s.start(['/nonexistent/qemu-system-x86_64'], { stderr: join(dir, 'e') }, () => undefined),
      /\/nonexistent\/qemu-system-x86_64: No such file or directory/,
    );
    // the helper still serves
    const e = ended();
    await s.start(['true'], { stderr: join(dir, 'e') }, e.onExit);
    assert.deepEqual(await e.p, { code: 0, signal: null });
  }),
);

test(
  'when the helper ends, its children live on and are reported lost; the next start runs a new helper',
  { skip },
  () =>
    withSpawner(async (s, dir, lost, ends) => {
      const pid = await s.start(['sleep', '60'], { stderr: join(dir, 'e') }, () => assert.fail('no end is reported'));
      const helper = s.helperPid!;
      process.kill(helper, 'SIGKILL');
      for (let i = 0; i < 200 && lost.length === 0; i++) await sleep(10);
      assert.deepEqual(lost, [pid]);
      assert.deepEqual(ends, ['the VM spawner ended (SIGKILL)'], 'the reason, once');
      assert.ok(alive(pid), 'the child outlives its spawner');
      process.kill(pid, 'SIGKILL');
      const e = ended();
      await s.start(['true'], { stderr: join(dir, 'e') }, e.onExit);
      assert.notEqual(s.helperPid, helper);
      assert.deepEqual(await e.p, { code: 0, signal: null });
    }),
);

test('a closed spawner refuses to start; its helper ends', { skip }, async () => {
  const ends: string[] = [];
  const s = new Spawner(
    () => undefined,
    (why) => ends.push(why),
  );
  const dir = mkdtempSync(join(tmpdir(), 'unihost-spawner-'));
  try {
    await s.start(['true'], { stderr: join(dir, 'e') }, () => undefined);
    const helper = s.helperPid!;
    s.close(); // a closed helper's end is not reported as one that ended by itself
    await assert.rejects(
      s.start(['true'], { stderr: join(dir, 'e') }, () => undefined),
      /closed/,
    );
    for (let i = 0; i < 200 && alive(helper); i++) await sleep(10);
    assert.equal(alive(helper), false);
    await sleep(50);
    assert.deepEqual(ends, [], 'a helper ended by close is not reported');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
