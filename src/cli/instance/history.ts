import type { Command } from 'commander';
import { ref, type HistoryEntry } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { listTable } from '../shared/output.js';

/** What a stop left, in words: `reason 2, exit code 1`. */
function stopText(e: HistoryEntry): string {
  const parts: string[] = [];
  if (e.stop_reason !== undefined) parts.push(`reason ${e.stop_reason}`);
  if (e.exit_code !== undefined) parts.push(`exit code ${e.exit_code}`);
  if (e.stop_code !== undefined) parts.push(`stop code ${e.stop_code}`);
  return parts.join(', ');
}

export function registerInstanceHistory(instance: Command): void {
  const cmd = instance
    .command('history')
    .description('show what happened to an instance: created, every state change, how each stop ended')
    .argument('<instance>', 'name or UUID')
    .action(async (name: string, _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const h = await ctx.client.instances.history(ref(name));
      ctx.print(h, () =>
        listTable(
          h.history,
          [
            { header: 'TIME', value: (e) => e.created_at },
            { header: 'EVENT', value: (e) => e.event },
            { header: 'FROM', value: (e) => e.from_state ?? '' },
            { header: 'TO', value: (e) => e.to_state ?? '' },
            { header: 'STOP', value: stopText },
          ],
          'no history',
        ),
      );
    });
  examples(cmd, ['unihost instance history web', 'unihost instance history web -o json']);
}
