import type { Command } from 'commander';
import { setTimeout as sleep } from 'node:timers/promises';
import { ref, type LogChunk, type Ref, type UnihostClient } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { durationMs, positiveInt } from '../shared/parse.js';

/** Public clients cap `limit` at 16383 (their range check); the server may return less. */
const CHUNK = 16383;

/** Where the next read starts: after the returned bytes, or where an empty read stood. */
function nextOffset(c: LogChunk): number {
  return c.range.end >= c.range.start ? c.range.end + 1 : c.range.start;
}

/** Reads from `offset` until the end available now; returns the bytes and the next offset. */
export async function readAll(client: UnihostClient, r: Ref, offset: number): Promise<{ bytes: Buffer; next: number }> {
  const parts: Buffer[] = [];
  let at = offset;
  for (;;) {
    const c = await client.instances.log(r, at, CHUNK);
    parts.push(Buffer.from(c.output, 'base64'));
    at = nextOffset(c);
    if (c.range.end >= c.available.end || c.range.end < c.range.start) return { bytes: Buffer.concat(parts), next: at };
  }
}

/** The last `n` lines of `b` (a final newline does not count as a line). */
export function lastLines(b: Buffer, n: number): Buffer {
  let i = b.length;
  if (i > 0 && b[i - 1] === 0x0a) i--;
  for (let seen = 0; i > 0; i--) {
    if (b[i - 1] === 0x0a && ++seen === n) break;
  }
  return b.subarray(i);
}

/** True when the instance has stopped for good (no restart pending). */
async function ended(client: UnihostClient, r: Ref): Promise<boolean> {
  const [i] = await client.instances.get([r]);
  return i!.state === 'stopped' && i!.restart.next_at === undefined;
}

interface LogsOpts {
  follow?: boolean;
  tail?: string;
  interval: string;
}

export function registerInstanceLogs(instance: Command): void {
  const cmd = instance
    .command('logs')
    .description('print the console log of an instance; -f follows it until the instance stops (or Ctrl-C)')
    .argument('<instance>', 'name or UUID')
    .option('-f, --follow', 'keep printing new output until the instance stops')
    .option('-n, --tail <lines>', 'start with the last N lines only')
    .option('--interval <duration>', 'how often -f polls for new output', '500ms')
    .action(async (name: string, o: LogsOpts, c: Command) => {
      const { client } = ctxOf(c);
      const r = ref(name);
      const interval = durationMs('--interval', o.interval);
      const tail = o.tail === undefined ? undefined : positiveInt('--tail', o.tail, 0);
      const first = await readAll(client, r, 0);
      process.stdout.write(tail === undefined ? first.bytes : lastLines(first.bytes, tail));
      let at = first.next;
      while (o.follow) {
        // Check the state before reading: output written before the stop is still read after it.
        const done = await ended(client, r);
        const more = await readAll(client, r, at);
        if (more.bytes.length > 0) process.stdout.write(more.bytes);
        at = more.next;
        if (done) break;
        await sleep(interval);
      }
    });
  examples(cmd, ['unihost instance logs web', 'unihost instance logs -f web', 'unihost instance logs -n 20 web']);
}
