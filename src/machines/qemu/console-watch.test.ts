import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { watchFiles } from './console-watch.js';

const dir = mkdtempSync(join(tmpdir(), 'uh-console-watch-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Resolves once `ok()` holds, or rejects after `ms`. */
async function until(ok: () => boolean, ms: number, what: string): Promise<void> {
  for (const end = Date.now() + ms; !ok(); await sleep(5)) if (Date.now() > end) throw new Error(`never: ${what}`);
}

test('a file written a byte at a time: a bounded number of calls, the last one after the last byte', async () => {
  const f = join(dir, 'serial.raw');
  writeFileSync(f, '');
  const seen: number[] = [];
  const pauseMs = 20;
  const w = watchFiles(
    dir,
    new Set(['serial.raw']),
    () => pauseMs,
    () => seen.push(readFileSync(f).length),
  );
  try {
    const t0 = Date.now();
    // 400 writes, each in a turn of its own: each is an inotify event the process could be woken by
    for (let i = 0; i < 400; i++) {
      appendFileSync(f, 'x');
      await new Promise((r) => setImmediate(r));
    }
    const elapsed = Date.now() - t0;
    await until(() => seen.at(-1) === 400, 2000, 'the last byte read');
    // one call as a change is seen and one as the watch is made again, per pause
    const bound = 2 * Math.ceil(elapsed / pauseMs) + 4;
    assert.ok(seen.length <= bound, `${seen.length} calls for 400 writes in ${elapsed} ms (at most ${bound})`);
    assert.ok(seen.length >= 2, `${seen.length} calls`);
  } finally {
    w.close();
  }
});

test('a change is answered at once, not at the end of the pause; other files and a closed watch call nothing', async () => {
  const f = join(dir, 'control.log');
  writeFileSync(f, '');
  let calls = 0;
  const pauseMs = 3000;
  const w = watchFiles(
    dir,
    new Set(['control.log']),
    () => pauseMs,
    () => calls++,
  );
  try {
    writeFileSync(join(dir, 'serial.pos'), '12'); // written by the reader itself: not watched
    await sleep(100);
    assert.equal(calls, 0, 'a file not named calls nothing');
    const t0 = Date.now();
    appendFileSync(f, 'ready\n');
    await until(() => calls === 1, pauseMs - 500, 'the change answered');
    assert.ok(Date.now() - t0 < pauseMs, 'before the pause ended');
  } finally {
    w.close();
  }
  appendFileSync(f, 'more\n');
  await sleep(200);
  assert.equal(calls, 1, 'nothing after close, the pending call at the pause end included');
});

test('a pause of 0 keeps the watch open: every turn of the event loop with changes is one call, none later', async () => {
  const f = join(dir, 'serial.raw');
  writeFileSync(f, '');
  const seen: number[] = [];
  let pause = 0;
  const w = watchFiles(
    dir,
    new Set(['serial.raw']),
    () => pause,
    () => seen.push(readFileSync(f).length),
  );
  try {
    for (let i = 1; i <= 20; i++) {
      appendFileSync(f, 'x');
      await until(() => seen.at(-1) === i, 2000, `byte ${i} read`);
    }
    assert.equal(seen.length, 20, 'one call per change seen on its own, no call for a pause ending');
    // the pause asked anew at each change: from now on, paused again
    pause = 3000;
    appendFileSync(f, 'y');
    await until(() => seen.at(-1) === 21, 2000, 'the change after the switch');
    appendFileSync(f, 'z');
    await sleep(200);
    assert.equal(seen.at(-1), 21, 'the next change waits for the pause to end');
  } finally {
    w.close();
  }
});

test('a directory that is not there: no watch, no throw (the caller polls)', () => {
  const w = watchFiles(
    join(dir, 'missing'),
    new Set(['serial.raw']),
    () => 2,
    () => assert.fail('called'),
  );
  w.close();
});
