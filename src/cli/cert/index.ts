import type { Command } from 'commander';
import { ref, type Certificate } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { addClientOptions, ctxOf, examples } from '../shared/context.js';
import { age, details, listTable } from '../shared/output.js';

export function certsTable(list: Certificate[]): string {
  return listTable(
    list,
    [
      { header: 'NAME', value: (x) => x.name },
      { header: 'COMMON NAME', value: (x) => x.common_name },
      { header: 'STATE', value: (x) => x.state },
      { header: 'VALID UNTIL', value: (x) => x.not_after ?? '' },
      { header: 'SERVICES', value: (x) => x.service_groups.map((g) => g.name).join(',') },
      { header: 'CREATED', value: (x) => age(x.created_at) },
    ],
    'no certificates',
  );
}

function registerCertList(cert: Command): void {
  const cmd = cert
    .command('list')
    .alias('ls')
    .description('list TLS certificates of custom domains')
    .action(async (_o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const ids = await ctx.client.certificates.list();
      const list = ids.length === 0 ? [] : await ctx.client.certificates.get(ids.map((x) => ({ uuid: x.uuid })));
      ctx.print(list, () => certsTable(list));
    });
  examples(cmd, ['unihost cert list']);
}

function registerCertGet(cert: Command): void {
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

function registerCertDelete(cert: Command): void {
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

/** `unihost cert ...`: certificates of custom domains. */
export function registerCert(program: Command): void {
  const cert = addClientOptions(
    program.command('cert').alias('certificate').description('list, inspect and delete TLS certificates'),
  );
  registerCertList(cert);
  registerCertGet(cert);
  registerCertDelete(cert);
}
