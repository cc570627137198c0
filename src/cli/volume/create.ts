import type { Command } from 'commander';
import { ctxOf, examples } from '../shared/context.js';
import { details } from '../shared/output.js';
import { positiveInt } from '../shared/parse.js';

export function registerVolumeCreate(volume: Command): void {
  const cmd = volume
    .command('create')
    .description('create an empty volume (ext4)')
    .requiredOption('-s, --size <MB>', 'size in MiB')
    .option('-n, --name <name>', 'volume name (default: generated)')
    .action(async (o: { size: string; name?: string }, c: Command) => {
      const ctx = ctxOf(c);
      const v = await ctx.client.volumes.create({
        size_mb: positiveInt('--size', o.size),
        ...(o.name !== undefined ? { name: o.name } : {}),
      });
      ctx.print(v, () => details({ ...v }));
    });
  examples(cmd, ['unihost volume create -n data -s 256']);
}
