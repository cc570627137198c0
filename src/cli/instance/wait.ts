import type { Command } from 'commander';
import { ref, type InstanceState } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';
import { UsageError } from '../shared/exit.js';
import { durationMs } from '../shared/parse.js';
import { withSpinner } from '../shared/spinner.js';
import { transitionsTable } from './stop.js';

const STATES = ['stopped', 'starting', 'running', 'draining', 'stopping', 'standby', 'template', 'checkpoint'];

export function registerInstanceWait(instance: Command): void {
  const cmd = instance
    .command('wait')
    .description('wait until instances reach a state (exit code 6 when the time runs out)')
    .argument('<instance...>', 'names or UUIDs')
    .option('-s, --state <state>', `state to wait for (${STATES.join(', ')})`, 'running')
    .option('-t, --timeout <duration>', 'longest wait (default: the longest the server allows)')
    .action(async (names: string[], o: { state: string; timeout?: string }, c: Command) => {
      const ctx = ctxOf(c);
      if (!STATES.includes(o.state)) throw new UsageError(`--state must be one of ${STATES.join(', ')}`);
      const ms = o.timeout === undefined ? -1 : durationMs('--timeout', o.timeout);
      const r = await settle(
        withSpinner(`waiting for ${names.join(', ')} to be ${o.state}`, () =>
          ctx.client.instances.wait(names.map(ref), o.state as InstanceState, ms),
        ),
      );
      if (r.ok.length > 0) ctx.print(r.ok, () => transitionsTable(r.ok));
      rethrow(r);
    });
  examples(cmd, ['unihost instance wait web', 'unihost instance wait -s stopped -t 30s job']);
}
