import type { Command } from 'commander';
import { ctxOf, examples } from '../shared/context.js';
import { details } from '../shared/output.js';
import { collect, portSpec } from '../shared/parse.js';

export function registerServiceCreate(service: Command): void {
  const cmd = service
    .command('create')
    .description('create a service group publishing ports (instances join it with instance create -g)')
    .option('-n, --name <name>', 'group name (default: generated)')
    .option('-p, --port <spec>', 'published port: PORT[:DEST][/tls+http] (repeatable)', collect, [])
    .option('-d, --domain <name>', 'domain: a name under the metro domain, or an FQDN ending with a dot', collect, [])
    .action(async (o: { name?: string; port: string[]; domain: string[] }, c: Command) => {
      const ctx = ctxOf(c);
      const g = await ctx.client.services.create({
        ...(o.name !== undefined ? { name: o.name } : {}),
        services: o.port.map(portSpec),
        ...(o.domain.length > 0 ? { domains: o.domain.map((name) => ({ name })) } : {}),
      });
      ctx.print(g, () => details({ ...g, domains: g.domains.map((d) => d.fqdn).join(', ') }));
    });
  examples(cmd, [
    'unihost service create -n web -p 443:8080',
    'unihost service create -n site -p 443:80 -d www.example.com.',
  ]);
}
