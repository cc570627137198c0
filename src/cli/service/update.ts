import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { applyUpdates, updatesTable } from '../shared/updates.js';

export function registerServiceUpdate(service: Command): void {
  const cmd = service
    .command('update')
    .description(
      'change a service group: soft_limit and hard_limit (requests or connections per instance), services, domains',
    )
    .argument('<service>', 'name or UUID')
    .argument('<change...>', 'PROP=VALUE (set), PROP+=VALUE (add), PROP-=VALUE or PROP-= (remove)')
    .action(async (name: string, changes: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const done = await applyUpdates((u) => ctx.client.services.update(ref(name), u), changes);
      ctx.print(done, () => updatesTable(done));
    });
  examples(cmd, [
    'unihost service update web soft_limit=20 hard_limit=100',
    'unihost service update web hard_limit-=',
    'unihost service update web \'domains+={"name":"blog"}\'',
  ]);
}
