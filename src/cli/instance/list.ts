import type { Command } from 'commander';
import { ctxOf, examples } from '../shared/context.js';
import { instancesTable } from './view.js';

export function registerInstanceList(instance: Command): void {
  const cmd = instance
    .command('list')
    .alias('ls')
    .description('list instances with their state, image, memory, address and boot time')
    .option('--state <state>', 'only instances in this state (running, stopped, ...)')
    .action(async (o: { state?: string }, c: Command) => {
      const ctx = ctxOf(c);
      const all = await ctx.client.instances.listDetailed();
      const list = o.state === undefined ? all : all.filter((i) => i.state === o.state);
      ctx.print(list, () => instancesTable(list));
    });
  examples(cmd, ['unihost instance list', 'unihost instance list --state running -o json']);
}
