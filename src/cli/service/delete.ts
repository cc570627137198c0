import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';

export function registerServiceDelete(service: Command): void {
  const cmd = service
    .command('delete')
    .alias('rm')
    .description('delete service groups (refused while instances are attached)')
    .argument('<service...>', 'names or UUIDs')
    .action(async (names: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await settle(ctx.client.services.delete(names.map(ref)));
      if (r.ok.length > 0) ctx.print(r.ok, () => r.ok.map((g) => `deleted ${g.name}`).join('\n'));
      rethrow(r);
    });
  examples(cmd, ['unihost service delete web']);
}
