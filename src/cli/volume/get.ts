import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';
import { details } from '../shared/output.js';

export function registerVolumeGet(volume: Command): void {
  const cmd = volume
    .command('get')
    .description('show volumes in detail')
    .argument('<volume...>', 'names or UUIDs')
    .action(async (names: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await settle(ctx.client.volumes.get(names.map(ref)));
      if (r.ok.length > 0)
        ctx.print(names.length === 1 ? r.ok[0] : r.ok, () => r.ok.map((v) => details({ ...v })).join('\n\n'));
      rethrow(r);
    });
  examples(cmd, ['unihost volume get data']);
}
