import type { Command } from 'commander';
import type { Volume } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { age, listTable } from '../shared/output.js';

export function volumesTable(list: Volume[]): string {
  return listTable(
    list,
    [
      { header: 'NAME', value: (v) => v.name },
      { header: 'STATE', value: (v) => v.state },
      { header: 'SIZE', value: (v) => `${v.size_mb} MiB` },
      { header: 'ATTACHED TO', value: (v) => (v.attached_to ?? []).map((a) => a.uuid).join(',') },
      { header: 'PERSISTENT', value: (v) => String(v.persistent) },
      { header: 'CREATED', value: (v) => age(v.created_at) },
    ],
    'no volumes',
  );
}

export function registerVolumeList(volume: Command): void {
  const cmd = volume
    .command('list')
    .alias('ls')
    .description('list volumes with state, size and attachment')
    .action(async (_o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const ids = await ctx.client.volumes.list();
      const list = ids.length === 0 ? [] : await ctx.client.volumes.get(ids.map((v) => ({ uuid: v.uuid })));
      ctx.print(list, () => volumesTable(list));
    });
  examples(cmd, ['unihost volume list', 'unihost volume ls -o json']);
}
