import type { Command } from 'commander';
import { ctxOf, examples } from '../shared/context.js';
import { imageTags, instancesTable } from './view.js';

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
      // a table names images by a tag of theirs (JSON and YAML keep the API's digest)
      const tags = ctx.format === 'table' && list.length > 0 ? await imageTags(ctx.client) : undefined;
      ctx.print(list, () => instancesTable(list, tags));
    });
  examples(cmd, ['unihost instance list', 'unihost instance list --state running -o json']);
}
