import type { Command } from 'commander';
import type { Certificate } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { age, listTable } from '../shared/output.js';

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

export function registerCertList(cert: Command): void {
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
