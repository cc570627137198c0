import type { Command } from 'commander';
import { ref, type Ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples, type CommandCtx } from '../shared/context.js';
import { listTable } from '../shared/output.js';
import { durationMs } from '../shared/parse.js';
import { withSpinner } from '../shared/spinner.js';

export interface Transition {
  uuid: string;
  name: string;
  state?: string;
  previous_state?: string;
}

export function transitionsTable(list: Transition[]): string {
  return listTable(
    list,
    [
      { header: 'NAME', value: (i) => i.name },
      { header: 'PREVIOUS', value: (i) => i.previous_state ?? '' },
      { header: 'STATE', value: (i) => i.state ?? '' },
    ],
    'nothing changed',
  );
}

/** Waits for `state` on the instances that are not there yet; returns the final states. */
export async function waitFor(
  ctx: CommandCtx,
  list: Transition[],
  state: 'running' | 'stopped' | 'standby',
  ms: number,
) {
  const pending: Ref[] = list.filter((i) => i.state !== state).map((i) => ({ uuid: i.uuid }));
  if (ms <= 0 || pending.length === 0) return list;
  const done = await withSpinner(`waiting for ${pending.length} instance(s) to be ${state}`, () =>
    ctx.client.instances.wait(pending, state, ms),
  );
  return list.map((i) => ({ ...i, state: done.find((d) => d.uuid === i.uuid)?.state ?? i.state }));
}

export function registerInstanceStop(instance: Command): void {
  const cmd = instance
    .command('stop')
    .description('stop instances and wait until they are stopped')
    .argument('<instance...>', 'names or UUIDs')
    .option('--force', 'kill at once, no clean shutdown')
    .option('--drain <duration>', 'let connections drain for at most this long first')
    .option('-w, --wait <duration>', 'longest wait for stopped (0: do not wait)', '60s')
    .action(async (names: string[], o: { force?: boolean; drain?: string; wait: string }, c: Command) => {
      const ctx = ctxOf(c);
      const waitMs = durationMs('--wait', o.wait);
      const params = {
        ...(o.force ? { force: true } : {}),
        ...(o.drain !== undefined ? { drain_timeout_ms: durationMs('--drain', o.drain) } : {}),
      };
      const r = await settle(ctx.client.instances.stop(names.map(ref), params));
      const out = await waitFor(ctx, r.ok, 'stopped', waitMs);
      if (out.length > 0) ctx.print(out, () => transitionsTable(out));
      rethrow(r);
    });
  examples(cmd, [
    'unihost instance stop web',
    'unihost instance stop --drain 10s web',
    'unihost instance stop -w 0 a b',
  ]);
}

export function registerInstanceSuspend(instance: Command): void {
  const cmd = instance
    .command('suspend')
    .description(
      "suspend running instances: their memory goes to a snapshot and they wait in standby; 'start' resumes them where they were",
    )
    .argument('<instance...>', 'names or UUIDs')
    .option('--drain <duration>', 'let connections drain for at most this long first')
    .option('-w, --wait <duration>', 'longest wait for standby (0: do not wait)', '60s')
    .action(async (names: string[], o: { drain?: string; wait: string }, c: Command) => {
      const ctx = ctxOf(c);
      const waitMs = durationMs('--wait', o.wait);
      const params = o.drain !== undefined ? { drain_timeout_ms: durationMs('--drain', o.drain) } : {};
      const r = await settle(ctx.client.instances.suspend(names.map(ref), params));
      const out = await waitFor(ctx, r.ok, 'standby', waitMs);
      if (out.length > 0) ctx.print(out, () => transitionsTable(out));
      rethrow(r);
    });
  examples(cmd, ['unihost instance suspend web', 'unihost instance start web   # resumes it']);
}
