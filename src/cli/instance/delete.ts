import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';
import { UsageError } from '../shared/exit.js';
import { transitionsTable } from './stop.js';

export function registerInstanceDelete(instance: Command): void {
  const cmd = instance
    .command('delete')
    .alias('rm')
    .description('delete instances (a running one is stopped at once)')
    .argument('[instance...]', 'names or UUIDs')
    .option('--all', 'delete every instance')
    .action(async (names: string[], o: { all?: boolean }, c: Command) => {
      const ctx = ctxOf(c);
      if (o.all === names.length > 0) throw new UsageError('give instance names or --all (not both)');
      const refs = o.all ? (await ctx.client.instances.list()).map((i) => ({ uuid: i.uuid })) : names.map(ref);
      if (refs.length === 0) return ctx.print([], () => 'no instances');
      const r = await settle(ctx.client.instances.delete(refs));
      if (r.ok.length > 0) ctx.print(r.ok, () => transitionsTable(r.ok.map((i) => ({ ...i, state: 'deleted' }))));
      rethrow(r);
    });
  examples(cmd, ['unihost instance delete web', 'unihost instance rm a b', 'unihost instance delete --all']);
}
