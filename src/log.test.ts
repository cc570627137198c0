import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { logDestination } from './log.js';

const MiB = 1024 * 1024;

/** Whether line `i` has reached a log file in `dir` (the worker thread writes it when it can). */
const written = (dir: string, i: number): boolean =>
  readdirSync(dir)
    .filter((f) => /^unihost\.\d+\.log$/.test(f))
    .some((f) => {
      try {
        return readFileSync(join(dir, f), 'utf8').includes(`"i":${i},`);
      } catch {
        return false; // pruned since it was listed
      }
    });

/**
 * Writes `mb` MiB of log lines through a logger on `log.file` = `file`, then
 * ends it (flushed). As a daemon logs over time, not all at once: each
 * 250 KB is on disk before more is written, however loaded the machine (the
 * worker checks the size per write it makes, so one huge burst would land
 * in one file).
 */
async function writeLogs(file: string, mb: number, o = { maxSizeMb: 1, keep: 2 }): Promise<void> {
  const dest = logDestination({ file, ...o })!;
  const logger = pino({ level: 'info' }, dest);
  const pad = 'x'.repeat(1000);
  const alive = setInterval(() => undefined, 1000); // the transport's worker thread is unref'd
  try {
    for (let i = 0; i < mb * 1000; i++) {
      logger.info({ i, pad }, 'a line');
      if (i % 250 !== 249) continue;
      for (let t = 0; !written(dirname(file), i); t++) {
        if (t > 1000) throw new Error(`line ${i} was not written within 10 s`);
        await new Promise((r) => setTimeout(r, 10));
      }
    }
    // bounded: one CI run (2026-11-29) waited here until the runner's 15-minute timeout
    const closed = once(dest as unknown as NodeJS.EventEmitter, 'close', { signal: AbortSignal.timeout(10_000) });
    (dest as unknown as NodeJS.WritableStream).end();
    await closed;
  } finally {
    clearInterval(alive);
  }
}

describe('the daemon log file (log.file): rolled by size, the oldest removed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'uh-log-test-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('stdout when no file is set', () => {
    assert.equal(logDestination({ file: '', maxSizeMb: 1, keep: 1 }), undefined);
  });

  test('5 MB of lines with 1 MB files and 2 kept: at most 3 files of about 1 MB, current.log names the newest', async () => {
    const file = join(dir, 'logs', 'unihost.log');
    await writeLogs(file, 5);
    const logs = readdirSync(join(dir, 'logs'))
      .filter((f) => /^unihost\.\d+\.log$/.test(f))
      .sort((a, b) => Number(a.split('.')[1]) - Number(b.split('.')[1]));
    assert.ok(logs.length >= 2 && logs.length <= 3, `rolled and pruned: ${logs.join(', ')}`);
    for (const f of logs.slice(0, -1)) {
      const size = statSync(join(dir, 'logs', f)).size;
      // about 1 MB: pino-roll rolls at the first drain after the limit, and counts what was written
      // meanwhile toward the next file (that one rolls early by as much)
      assert.ok(size >= 0.7 * MiB && size < 1.3 * MiB, `${f} is ${size} bytes: rolled at about 1 MB`);
    }
    const total = logs.reduce((n, f) => n + statSync(join(dir, 'logs', f)).size, 0);
    assert.ok(total < 3.75 * MiB, `${total} bytes kept of 5 MB written: the oldest went`);
    const newest = logs.at(-1)!;
    assert.equal(
      readlinkSync(join(dir, 'logs', 'current.log'))
        .split('/')
        .pop(),
      newest,
    );
    // the newest file with lines (a roll right after the last line leaves the newest empty)
    const texts = logs.map((f) => readFileSync(join(dir, 'logs', f), 'utf8').trim()).filter(Boolean);
    const last = texts.at(-1)!.split('\n').at(-1)!;
    assert.equal(JSON.parse(last).i, 4999, 'the last line written is there, whole');
    const first = Number(
      readFileSync(join(dir, 'logs', logs[0]!), 'utf8')
        .split('\n')[0]!
        .match(/"i":(\d+)/)![1],
    );
    assert.ok(first > 0, 'the oldest lines are gone');
  });
});
