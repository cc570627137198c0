import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';

export function registerVolumeDelete(volume: Command): void {
  const cmd = volume
    .command('delete')
    .alias('rm')
    .description('delete volumes (refused while attached)')
    .argument('<volume...>', 'names or UUIDs')
    .action(async (names: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await settle(ctx.client.volumes.delete(names.map(ref)));
      if (r.ok.length > 0) ctx.print(r.ok, () => r.ok.map((v) => `deleted ${v.name}`).join('\n'));
      rethrow(r);
    });
  examples(cmd, ['unihost volume delete data']);
}
