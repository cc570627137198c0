import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';
import { details } from '../shared/output.js';

export function registerCertGet(cert: Command): void {
  const cmd = cert
    .command('get')
    .description('show certificates in detail')
    .argument('<cert...>', 'names or UUIDs')
    .action(async (names: string[], _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const r = await settle(ctx.client.certificates.get(names.map(ref)));
      if (r.ok.length > 0)
        ctx.print(names.length === 1 ? r.ok[0] : r.ok, () => r.ok.map((x) => details({ ...x })).join('\n\n'));
      rethrow(r);
    });
  examples(cmd, ['unihost cert get www-example-com']);
}
