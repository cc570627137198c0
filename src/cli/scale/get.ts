import type { Command } from 'commander';
import { ref, type Policy } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { details, listTable } from '../shared/output.js';

const bound = (v: number | null) => (v === null ? '' : String(v));

export function policiesTable(ps: Policy[]): string {
  return listTable(
    ps.flatMap((p) => p.steps.map((s, i) => ({ p, s, first: i === 0 }))),
    [
      { header: 'POLICY', value: (x) => (x.first ? x.p.name : '') },
      { header: 'METRIC', value: (x) => (x.first ? x.p.metric : '') },
      { header: 'ADJUSTMENT', value: (x) => (x.first ? x.p.adjustment_type : '') },
      { header: 'STEP', value: (x) => `[${bound(x.s.lower_bound)}, ${bound(x.s.upper_bound)})` },
      { header: 'CHANGE', value: (x) => String(x.s.adjustment) },
    ],
    'no policies',
  );
}

export function registerScaleGet(scale: Command): void {
  const cmd = scale
    .command('get')
    .description("show a service group's autoscale configuration and policies")
    .argument('<service>', 'service group name or UUID')
    .action(async (group: string, _o: unknown, c: Command) => {
      const ctx = ctxOf(c);
      const a = await ctx.client.autoscale.get(ref(group));
      ctx.print(a, () => {
        if (a.status === 'unconfigured') return `autoscale is not configured for ${a.name}`;
        const { policies, master, ...rest } = a;
        return `${details({ ...rest, master: master.name ?? master.uuid })}\n\n${policiesTable(policies)}`;
      });
    });
  examples(cmd, ['unihost scale get web', 'unihost scale get web -o json']);
}
