import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';

export function registerScaleReset(scale: Command): void {
  const cmd = scale
    .command('reset')
    .description('remove the autoscale configuration (clones drain and are deleted; the master stays)')
    .argument('<service>', 'service group name or UUID')
    .action(async (group: string, _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await ctx.client.autoscale.delete(ref(group));
      ctx.print(r, () => `autoscale removed from ${r.name}`);
    });
  examples(cmd, ['unihost scale reset web']);
}
