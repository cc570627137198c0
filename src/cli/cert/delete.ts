import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';

export function registerCertDelete(cert: Command): void {
  const cmd = cert
    .command('delete')
    .alias('rm')
    .description('delete certificates (refused while a service group uses one)')
    .argument('<cert...>', 'names or UUIDs')
    .action(async (names: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await settle(ctx.client.certificates.delete(names.map(ref)));
      if (r.ok.length > 0) ctx.print(r.ok, () => r.ok.map((x) => `deleted ${x.name}`).join('\n'));
      rethrow(r);
    });
  examples(cmd, ['unihost cert delete www-example-com']);
}
