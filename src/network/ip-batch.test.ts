// The long-lived `ip` (ip-batch.ts) against the real `ip`, with commands that change nothing on the host:
// failures are told to the request whose line failed, a dead or silent process fails what it had and is
// started again.
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BatchError, IpBatch } from './ip-batch.js';
import { CommandError } from './cmd.js';

test('each request learns of its own failed lines only; the process serves many requests', async () => {
  const b = new IpBatch(['ip'], 5000);
  try {
    const [bad, good, also] = await Promise.allSettled([
      b.run(['link set dev uhnosuch0 up', 'link set dev lo up', 'link set dev uhnosuch1 up']),
      b.run(['link set dev lo up']),
      b.run(['link set dev lo up', 'link set dev lo up']),
    ]);
    assert.equal(bad.status, 'rejected');
    const e = (bad as PromiseRejectedResult).reason as CommandError;
    assert.ok(e instanceof CommandError);
    assert.match(e.stderr, /^link set dev uhnosuch0 up: Cannot find device "uhnosuch0"$/m);
    assert.match(e.stderr, /^link set dev uhnosuch1 up: Cannot find device "uhnosuch1"$/m);
    assert.doesNotMatch(e.stderr, /dev lo/);
    assert.deepEqual([good.status, also.status], ['fulfilled', 'fulfilled']);
    for (let i = 0; i < 50; i++) await b.run(['link set dev lo up']);
    // nothing to do costs nothing, and the line count stays right for what follows
    await b.run([]);
    await assert.rejects(
      b.run(['link set dev lo up', 'link set dev uhnosuch2 up']),
      /link set dev uhnosuch2 up: Cannot find device/,
    );
  } finally {
    b.close();
  }
});

test('a command that would print is refused before it is sent', async () => {
  const b = new IpBatch(['ip'], 5000);
  await assert.rejects(b.run(['link show dev lo']), /is not one command that prints nothing/);
  await assert.rejects(b.run(['link set dev lo up\nlink del dev lo']), /is not one command/);
  b.close();
});

test('a process that dies fails the requests it had, and the next request starts another', async () => {
  const b = new IpBatch(['ip'], 5000);
  try {
    await b.run(['link set dev lo up']);
    const pending = b.run(['link set dev lo up']);
    b.close(); // as if it died with the request under way
    await assert.rejects(pending, (e: CommandError) => e instanceof CommandError && /closed/.test(e.stderr));
    await b.run(['link set dev lo up']);
  } finally {
    b.close();
  }
});

test('a process that does not answer is killed at the deadline; the request fails naming it', async () => {
  // `sh -c 'exec sleep 30'` reads nothing and answers nothing (the arguments meant for ip are its $0...)
  const b = new IpBatch(['sh', '-c', 'exec sleep 30'], 200);
  const t0 = Date.now();
  await assert.rejects(b.run(['link set dev lo up']), (e: CommandError) => e.timeoutMs === 200);
  assert.ok(Date.now() - t0 < 5000);
  b.close();
});

test(
  'the same for bridge: forwarding entries written by one running bridge, failures told to their request',
  { skip: process.getuid?.() !== 0 && 'needs root (a network namespace of its own)' },
  async () => {
    const ns = `uhbb-${process.pid}`;
    const ip = (...a: string[]) => execFileSync('ip', ['-n', ns, ...a]);
    execFileSync('ip', ['netns', 'add', ns]);
    const b = new IpBatch(['ip', 'netns', 'exec', ns, 'bridge'], 5000, 'bridge');
    try {
      ip('link', 'add', 'br0', 'type', 'bridge');
      ip('tuntap', 'add', 'dev', 'd0', 'mode', 'tap');
      ip('link', 'set', 'd0', 'master', 'br0');
      const [bad, good] = await Promise.allSettled([
        b.run(['fdb replace 02:00:00:00:00:01 dev uhnosuch0 master static']),
        b.run([
          'fdb replace 02:00:00:00:00:02 dev d0 master static',
          'fdb replace 02:00:00:00:00:03 dev d0 master static',
        ]),
      ]);
      assert.equal(bad.status, 'rejected');
      assert.match(
        ((bad as PromiseRejectedResult).reason as CommandError).stderr,
        /uhnosuch0 master static: Cannot find device "uhnosuch0"/,
      );
      assert.equal(good.status, 'fulfilled');
      await b.run(['fdb del 02:00:00:00:00:03 dev d0 master']);
      const fdb = execFileSync('bridge', ['-n', ns, 'fdb', 'show', 'dev', 'd0'], { encoding: 'utf8' });
      assert.match(fdb, /^02:00:00:00:00:02 .*static/m);
      assert.doesNotMatch(fdb, /02:00:00:00:00:03/);
      await assert.rejects(b.run(['fdb show dev d0']), /bridge batch: .* is not one command that prints nothing/);
      // a device made again under a name it knew is an unknown index to a running bridge, until it is renewed
      ip('link', 'del', 'd0');
      ip('tuntap', 'add', 'dev', 'd0', 'mode', 'tap');
      ip('link', 'set', 'd0', 'master', 'br0');
      const line = 'fdb replace 02:00:00:00:00:04 dev d0 master static';
      await assert.rejects(b.run([line]), (e: BatchError) => /unknown ifindex/i.test(e.stderr) && e.failed[0] === line);
      b.renew();
      await b.run([line]);
      assert.match(
        execFileSync('bridge', ['-n', ns, 'fdb', 'show', 'dev', 'd0'], { encoding: 'utf8' }),
        /^02:00:00:00:00:04 /m,
      );
    } finally {
      b.close();
      execFileSync('ip', ['netns', 'del', ns]);
    }
  },
);
