import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';
import { groupDetails } from './view.js';

export function registerServiceGet(service: Command): void {
  const cmd = service
    .command('get')
    .description('show service groups in detail')
    .argument('<service...>', 'names or UUIDs')
    .action(async (names: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await settle(ctx.client.services.get(names.map(ref)));
      if (r.ok.length > 0) ctx.print(names.length === 1 ? r.ok[0] : r.ok, () => r.ok.map(groupDetails).join('\n\n'));
      rethrow(r);
    });
  examples(cmd, ['unihost service get web', 'unihost service get web -o yaml']);
}
