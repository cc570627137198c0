import type { Command } from 'commander';
import { ref, type Volume } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { addClientOptions, ctxOf, examples } from '../shared/context.js';
import { age, details, listTable } from '../shared/output.js';
import { positiveInt } from '../shared/parse.js';
import { registerVolumeAttach, registerVolumeDetach } from './attach.js';

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

function registerVolumeCreate(volume: Command): void {
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

function registerVolumeList(volume: Command): void {
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

function registerVolumeGet(volume: Command): void {
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

function registerVolumeDelete(volume: Command): void {
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

/** `unihost volume ...`: persistent volumes. */
export function registerVolume(program: Command): void {
  const volume = addClientOptions(program.command('volume').alias('volumes').description('manage persistent volumes'));
  registerVolumeCreate(volume);
  registerVolumeList(volume);
  registerVolumeGet(volume);
  registerVolumeAttach(volume);
  registerVolumeDetach(volume);
  registerVolumeDelete(volume);
}
