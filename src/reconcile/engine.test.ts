import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KeyedQueue, retryDelay, RetryingQueue } from './engine.js';

test('KeyedQueue.run serializes jobs of one key and runs other keys alongside', async () => {
  const q = new KeyedQueue();
  const log: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  void q.run('a', async () => {
    log.push('a1 start');
    await gate;
    log.push('a1 end');
  });
  void q.run('a', async () => void log.push('a2'));
  await q.run('b', async () => void log.push('b1'));
  assert.deepEqual(log, ['a1 start', 'b1']);
  release();
  await q.drain();
  assert.deepEqual(log, ['a1 start', 'b1', 'a1 end', 'a2']);
});

test('KeyedQueue.kick merges the kicks queued behind a running job into one more run', async () => {
  const q = new KeyedQueue();
  let runs = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  void q.kick('k', async () => {
    runs++;
    await gate;
  });
  void q.kick('k', async () => void runs++); // merged: the first has not started yet
  await new Promise((r) => setImmediate(r)); // the first job is now running
  assert.equal(runs, 1);
  for (let i = 0; i < 10; i++) void q.kick('k', async () => void runs++);
  release();
  await q.drain();
  assert.equal(runs, 2);
  // once that run has started, a new kick queues again
  await q.kick('k', async () => void runs++);
  assert.equal(runs, 3);
});

test('KeyedQueue reports a failing job and keeps running the next ones', async () => {
  const errors: string[] = [];
  const q = new KeyedQueue((key, e) => errors.push(`${key}: ${(e as Error).message}`));
  void q.run('k', async () => {
    throw new Error('boom');
  });
  let ran = false;
  await q.run('k', async () => void (ran = true));
  assert.deepEqual(errors, ['k: boom']);
  assert.equal(ran, true);
});

test('retryDelay doubles per failure up to the cap, with 50-100% jitter', () => {
  const lo = () => 0;
  const hi = () => 0.999999;
  assert.deepEqual(
    [1, 2, 3, 4].map((n) => retryDelay(n, undefined, hi)),
    [1000, 2000, 4000, 8000],
  );
  assert.deepEqual(
    [1, 2, 3].map((n) => retryDelay(n, undefined, lo)),
    [500, 1000, 2000],
  );
  assert.equal(retryDelay(30, undefined, hi), 60_000);
  assert.equal(retryDelay(30, undefined, lo), 30_000);
});

test('RetryingQueue retries a failing key with growing delays and stops retrying once it succeeds', async () => {
  const pending: Array<{ fn: () => void; ms: number }> = [];
  const timers = {
    setTimeout: (fn: () => void, ms: number) => pending.push({ fn, ms }),
    clearTimeout: () => undefined,
  };
  let fails = 3;
  let runs = 0;
  const errors: Array<[number, number]> = [];
  const q = new RetryingQueue(
    async () => {
      runs++;
      if (fails-- > 0) throw new Error('not yet');
    },
    (_k, _e, n, ms) => errors.push([n, ms]),
    { timers, now: () => 0, rnd: () => 0.999999 },
  );
  await q.kick('k');
  for (let i = 0; i < 3; i++) {
    const t = pending.shift()!;
    t.fn();
    await q.drain();
  }
  assert.deepEqual(errors, [
    [1, 1000],
    [2, 2000],
    [3, 4000],
  ]);
  assert.equal(runs, 4);
  assert.equal(pending.length, 0, 'no retry after the success');
  await q.stop();
  await q.kick('k');
  assert.equal(runs, 4, 'no run after stop');
});
