import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';
import { instanceDetails } from './view.js';

export function registerInstanceGet(instance: Command): void {
  const cmd = instance
    .command('get')
    .description('show instances in detail (by name or UUID)')
    .argument('<instance...>', 'names or UUIDs')
    .action(async (names: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await settle(ctx.client.instances.get(names.map(ref)));
      const data = names.length === 1 ? r.ok[0] : r.ok;
      if (r.ok.length > 0) ctx.print(data, () => r.ok.map(instanceDetails).join('\n\n'));
      rethrow(r);
    });
  examples(cmd, ['unihost instance get web', 'unihost instance get web db -o yaml']);
}
