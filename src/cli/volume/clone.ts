import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { details } from '../shared/output.js';

export function registerVolumeClone(volume: Command): void {
  const cmd = volume
    .command('clone')
    .description('copy a volume (or a volume template) into a new volume; copy-on-write where the file system allows')
    .argument('<volume>', 'name or UUID of the volume to copy')
    .option('-n, --name <name>', 'name of the copy (default: generated)')
    .action(async (name: string, o: { name?: string }, c: Command) => {
      const ctx = ctxOf(c);
      const r = await ctx.client.volumes.clone(ref(name), o.name !== undefined ? { vol_name: o.name } : {});
      ctx.print(r, () => details({ ...r }));
    });
  examples(cmd, ['unihost volume clone data -n data-copy']);
}
