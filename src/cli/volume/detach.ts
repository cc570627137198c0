import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';

export function registerVolumeDetach(volume: Command): void {
  const cmd = volume
    .command('detach')
    .description('detach a volume from its stopped instance')
    .argument('<volume>', 'name or UUID')
    .action(async (name: string, _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const v = await ctx.client.volumes.detach(ref(name));
      ctx.print(v, () => `detached ${v.name}`);
    });
  examples(cmd, ['unihost volume detach data']);
}
