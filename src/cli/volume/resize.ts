import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { details } from '../shared/output.js';
import { positiveInt } from '../shared/parse.js';

export function registerVolumeResize(volume: Command): void {
  const cmd = volume
    .command('resize')
    .description('grow or shrink a volume and its ext4 file system (offline: the volume must not be in use)')
    .argument('<volume>', 'name or UUID')
    .requiredOption('-s, --size <MB>', 'new size in MiB (not below what the files use)')
    .action(async (name: string, o: { size: string }, c: Command) => {
      const ctx = ctxOf(c);
      const r = await ctx.client.volumes.update(ref(name), {
        prop: 'size_mb',
        op: 'set',
        value: positiveInt('--size', o.size),
      });
      ctx.print(r, () => details({ ...r }));
    });
  examples(cmd, ['unihost volume resize data -s 1024']);
}
