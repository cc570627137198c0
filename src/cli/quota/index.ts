import type { Command } from 'commander';
import type { Quotas } from '../../client/index.js';
import { addClientOptions, ctxOf, examples } from '../shared/context.js';
import { table } from '../shared/output.js';

export function quotasText(q: Quotas): string {
  const used = table([
    ['RESOURCE', 'USED', 'LIMIT'],
    ...Object.entries(q.hard).map(([k, limit]) => [k, String(q.used[k as keyof Quotas['used']] ?? 0), String(limit)]),
  ]);
  const limits = table([['LIMIT', 'VALUE'], ...Object.entries(q.limits).map(([k, v]) => [k, String(v)])]);
  return `${used}\n\n${limits}`;
}

/** `unihost quota`: the calling user's usage and limits. */
export function registerQuota(program: Command): void {
  const cmd = addClientOptions(
    program
      .command('quota')
      .alias('quotas')
      .description('show your quota usage and limits')
      .action(async (_o: unknown, c: Command) => {
        const ctx = ctxOf(c);
        const q = await ctx.client.quotas();
        ctx.print(q, () => quotasText(q));
      }),
  );
  examples(cmd, ['unihost quota', 'unihost quota -o json']);
}
