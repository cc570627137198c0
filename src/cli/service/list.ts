import type { Command } from 'commander';
import { ctxOf, examples } from '../shared/context.js';
import { groupsTable } from './view.js';

export function registerServiceList(service: Command): void {
  const cmd = service
    .command('list')
    .alias('ls')
    .description('list service groups with their domains, ports and instances')
    .action(async (_o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const ids = await ctx.client.services.list();
      const list = ids.length === 0 ? [] : await ctx.client.services.get(ids.map((g) => ({ uuid: g.uuid })));
      ctx.print(list, () => groupsTable(list));
    });
  examples(cmd, ['unihost service list', 'unihost service ls -o json']);
}
