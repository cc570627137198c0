import type { Command } from 'commander';
import { ctxOf, examples } from '../shared/context.js';
import { groupUuid } from './add-policy.js';

export function registerScaleRemovePolicy(scale: Command): void {
  const cmd = scale
    .command('remove-policy')
    .description('remove a policy from a service group')
    .argument('<service>', 'service group name or UUID')
    .argument('<policy>', 'policy name')
    .action(async (group: string, name: string, _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await ctx.client.autoscale.deletePolicy(await groupUuid(ctx.client, group), name);
      ctx.print(r, () => `policy ${r.name} removed from ${group}`);
    });
  examples(cmd, ['unihost scale remove-policy web cpu-steps']);
}
