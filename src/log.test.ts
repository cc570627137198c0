import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import pino from 'pino';
import { logDestination } from './log.js';

const MiB = 1024 * 1024;

/** Writes `mb` MiB of log lines through a logger on `log.file` = `file`, then ends it (flushed). */
async function writeLogs(file: string, mb: number, o = { maxSizeMb: 1, keep: 2 }): Promise<void> {
  const dest = logDestination({ file, ...o })!;
  const logger = pino({ level: 'info' }, dest);
  const pad = 'x'.repeat(1000);
  for (let i = 0; i < mb * 1000; i++) {
    logger.info({ i, pad }, 'a line');
    // a daemon logs over time: the worker writes (and checks the size) as lines come
    if (i % 100 === 99) await new Promise((r) => setTimeout(r, 5));
  }
  const closed = once(dest as unknown as NodeJS.EventEmitter, 'close');
  const alive = setInterval(() => undefined, 1000); // the transport's worker thread is unref'd
  (dest as unknown as NodeJS.WritableStream).end();
  await closed;
  clearInterval(alive);
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
      assert.ok(size >= MiB && size < 1.25 * MiB, `${f} is ${size} bytes: rolled at 1 MB`);
    }
    const newest = logs.at(-1)!;
    assert.equal(
      readlinkSync(join(dir, 'logs', 'current.log'))
        .split('/')
        .pop(),
      newest,
    );
    const last = readFileSync(join(dir, 'logs', newest), 'utf8')
      .trim()
      .split('\n')
      .at(-1)!;
    assert.equal(JSON.parse(last).i, 4999, 'the last line written is in the newest file, whole');
    const first = Number(
      readFileSync(join(dir, 'logs', logs[0]!), 'utf8')
        .split('\n')[0]!
        .match(/"i":(\d+)/)![1],
    );
    assert.ok(first > 0, 'the oldest lines are gone');
  });
});
