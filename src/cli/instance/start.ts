import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';
import { durationMs } from '../shared/parse.js';
import { withSpinner } from '../shared/spinner.js';
import { transitionsTable } from './stop.js';

export function registerInstanceStart(instance: Command): void {
  const cmd = instance
    .command('start')
    .description('start instances and wait until they run')
    .argument('<instance...>', 'names or UUIDs')
    .option('-w, --wait <duration>', 'longest wait for running (0: do not wait)', '60s')
    .action(async (names: string[], o: { wait: string }, c: Command) => {
      const ctx = ctxOf(c);
      const waitMs = durationMs('--wait', o.wait);
      const r = await settle(
        withSpinner(`starting ${names.join(', ')}`, () => ctx.client.instances.start(names.map(ref), waitMs)),
      );
      if (r.ok.length > 0) ctx.print(r.ok, () => transitionsTable(r.ok));
      rethrow(r);
    });
  examples(cmd, ['unihost instance start web', 'unihost instance start -w 2m a b c']);
}
