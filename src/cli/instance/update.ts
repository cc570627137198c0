import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { applyUpdates, updatesTable } from '../shared/updates.js';

export function registerInstanceUpdate(instance: Command): void {
  const cmd = instance
    .command('update')
    .description(
      'change properties of an instance: image, args, env, memory_mb need it stopped; tags, annotations, delete_lock, hostname, scale_to_zero apply at once',
    )
    .argument('<instance>', 'name or UUID')
    .argument('<change...>', 'PROP=VALUE (set), PROP+=VALUE (add), PROP-=VALUE or PROP-= (remove)')
    .action(async (name: string, changes: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const done = await applyUpdates((u) => ctx.client.instances.update(ref(name), u), changes);
      ctx.print(done, () => updatesTable(done));
    });
  examples(cmd, [
    'unihost instance update web memory_mb=256',
    'unihost instance update web tags+=blue delete_lock=true',
    'unihost instance update web \'env={"MODE":"fast"}\'',
    'unihost instance update web scale_to_zero-=',
  ]);
}
