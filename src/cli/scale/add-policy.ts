import type { Command } from 'commander';
import { ref, type PolicyIn, type UnihostClient } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { UsageError } from '../shared/exit.js';
import { collect } from '../shared/parse.js';

/** Policy endpoints exist in local scope only: they need the group's UUID. */
export async function groupUuid(client: UnihostClient, group: string): Promise<string> {
  const r = ref(group);
  if (r.uuid !== undefined) return r.uuid;
  return (await client.services.get([r]))[0]!.uuid;
}

/** A step `LOWER:UPPER=ADJUSTMENT` (either bound may be empty), e.g. `0:500=1`, `800:=2`, `:100=-1`. */
export function stepSpec(v: string): NonNullable<PolicyIn['steps']>[number] {
  const m = /^(-?\d+)?:(-?\d+)?=(-?\d+)$/.exec(v);
  if (!m) throw new UsageError(`--step '${v}' is not LOWER:UPPER=ADJUSTMENT (e.g. 0:500=1, 800:=2)`);
  return {
    ...(m[1] !== undefined ? { lower_bound: Number(m[1]) } : {}),
    ...(m[2] !== undefined ? { upper_bound: Number(m[2]) } : {}),
    adjustment: Number(m[3]),
  };
}

export function registerScaleAddPolicy(scale: Command): void {
  const cmd = scale
    .command('add-policy')
    .description('add a step policy to a service group with autoscale')
    .argument('<service>', 'service group name or UUID')
    .argument('<policy>', 'policy name')
    .requiredOption('--step <LOWER:UPPER=ADJ>', 'a step (repeatable); bounds in millicores of CPU', collect, [])
    .option('--metric <metric>', 'metric (cpu)', 'cpu')
    .option('--adjustment-type <type>', 'change, exact or percent', 'change')
    .action(
      async (
        group: string,
        name: string,
        o: { step: string[]; metric: string; adjustmentType: string },
        c: Command,
      ) => {
        const ctx = ctxOf(c);
        if (o.step.length === 0) throw new UsageError('give at least one --step');
        const steps = o.step.map(stepSpec);
        const uuid = await groupUuid(ctx.client, group);
        const r = await ctx.client.autoscale.addPolicy(uuid, {
          name,
          type: 'step',
          metric: o.metric,
          adjustment_type: o.adjustmentType,
          steps,
        });
        ctx.print(r, () => `policy ${name} added to ${r.name}`);
      },
    );
  examples(cmd, ['unihost scale add-policy web cpu-steps --step :200=-1 --step 200:800=0 --step 800:=2']);
}
