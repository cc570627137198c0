import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';

export function registerVolumeAttach(volume: Command): void {
  const cmd = volume
    .command('attach')
    .description('attach a volume to a stopped instance')
    .argument('<volume>', 'name or UUID')
    .requiredOption('--to <instance>', 'instance name or UUID (must be stopped)')
    .requiredOption('--at <path>', 'mount path in the guest')
    .option('--readonly', 'mount read-only')
    .action(async (name: string, o: { to: string; at: string; readonly?: boolean }, c: Command) => {
      const ctx = ctxOf(c);
      const v = await ctx.client.volumes.attach(ref(name), {
        attach_to: ref(o.to),
        at: o.at,
        ...(o.readonly ? { readonly: true } : {}),
      });
      ctx.print(v, () => `attached ${v.name} to ${o.to} at ${o.at}`);
    });
  examples(cmd, ['unihost volume attach data --to db --at /var/lib/db']);
}
