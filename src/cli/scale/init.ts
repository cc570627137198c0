import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { ctxOf, examples } from '../shared/context.js';
import { durationMs, positiveInt } from '../shared/parse.js';

interface InitOpts {
  master: string;
  min?: string;
  max?: string;
  warmup?: string;
  cooldown?: string;
}

export function registerScaleInit(scale: Command): void {
  const cmd = scale
    .command('init')
    .description('configure autoscale for a service group, cloning a master instance')
    .argument('<service>', 'service group name or UUID')
    .requiredOption('--master <instance>', 'instance to clone (name or UUID)')
    .option('--min <n>', 'fewest instances (default 1)')
    .option('--max <n>', 'most instances (default 4)')
    .option('--warmup <duration>', 'time a new instance gets before it counts (default 1s)')
    .option('--cooldown <duration>', 'pause between scaling decisions (default 1s)')
    .action(async (group: string, o: InitOpts, c: Command) => {
      const ctx = ctxOf(c);
      const r = await ctx.client.autoscale.create(ref(group), {
        master: ref(o.master),
        ...(o.min !== undefined ? { min_size: positiveInt('--min', o.min, 0) } : {}),
        ...(o.max !== undefined ? { max_size: positiveInt('--max', o.max, 0) } : {}),
        ...(o.warmup !== undefined ? { warmup_time_ms: durationMs('--warmup', o.warmup) } : {}),
        ...(o.cooldown !== undefined ? { cooldown_time_ms: durationMs('--cooldown', o.cooldown) } : {}),
      });
      ctx.print(r, () => `autoscale configured for ${r.name} (master ${o.master})`);
    });
  examples(cmd, ['unihost scale init web --master web-1 --min 1 --max 4 --cooldown 30s']);
}
