import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { details } from '../shared/output.js';
import { UsageError } from '../shared/exit.js';

async function pem(flag: string, file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    throw new UsageError(
      `${flag} ${file}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`,
    );
  }
}

export function registerCertReplace(cert: Command): void {
  const cmd = cert
    .command('replace')
    .description(
      'replace a certificate with a new chain and key (served from the next TLS handshake; open connections stay)',
    )
    .argument('<cert>', 'name or UUID')
    .requiredOption('--chain <file>', 'PEM file: the certificate, then its intermediates')
    .requiredOption('--key <file>', 'PEM file: its private key (unencrypted)')
    .action(async (name: string, o: { chain: string; key: string }, c: Command) => {
      const ctx = ctxOf(c);
      const r = await ctx.client.certificates.replace(ref(name), {
        chain: await pem('--chain', o.chain),
        pkey: await pem('--key', o.key),
      });
      ctx.print(r, () => details({ ...r }));
    });
  examples(cmd, ['unihost cert replace www-example-com --chain fullchain.pem --key privkey.pem']);
}
