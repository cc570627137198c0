import type { Command } from 'commander';
import { ref } from '../../client/index.js';
import { rethrow, settle } from '../shared/batch.js';
import { ctxOf, examples } from '../shared/context.js';
import { durationMs } from '../shared/parse.js';
import { withSpinner } from '../shared/spinner.js';
import { transitionsTable } from './stop.js';
import { listTable } from '../shared/output.js';

/** `unihost instance template`: makes instances templates (docs/snapshots.md, "Templates"). */
export function registerInstanceTemplate(instance: Command): void {
  const cmd = instance
    .command('template')
    .description(
      "make running (or suspended) instances templates: their memory is kept and they never run again; 'create --template' starts new instances from it",
    )
    .argument('<instance...>', 'names or UUIDs')
    .option('-w, --wait <duration>', 'longest wait until each is a template (0: do not wait)', '60s')
    .action(async (names: string[], o: { wait: string }, c: Command) => {
      const ctx = ctxOf(c);
      const waitS = Math.ceil(durationMs('--wait', o.wait) / 1000);
      const r = await settle(
        withSpinner(`making ${names.length} template(s)`, () =>
          ctx.client.instances.makeTemplates(names.map(ref), waitS > 0 ? waitS : undefined),
        ),
      );
      if (r.ok.length > 0) ctx.print(r.ok, () => transitionsTable(r.ok));
      rethrow(r);
    });
  examples(cmd, [
    'unihost instance template web-golden',
    'unihost instance create -n web-2 --template web-golden -p 443:8080 --start',
  ]);
}

/** `unihost instance checkpoint`: the memory of a running instance, kept (docs/snapshots.md, "Checkpoints"). */
export function registerInstanceCheckpoint(instance: Command): void {
  const cmd = instance
    .command('checkpoint')
    .description(
      "keep the memory of a running instance as a checkpoint (it runs on); 'create --checkpoint' starts new instances from it",
    )
    .argument('<instance>', 'name or UUID')
    .option('-n, --name <name>', 'name of the checkpoint (default <instance>-ckpt-<random>)')
    .option('-w, --wait <duration>', 'longest wait until it is written (0: do not wait)', '60s')
    .action(async (name: string, o: { name?: string; wait: string }, c: Command) => {
      const ctx = ctxOf(c);
      const waitS = Math.ceil(durationMs('--wait', o.wait) / 1000);
      const made = await withSpinner(`taking a checkpoint of ${name}`, () =>
        ctx.client.instances.checkpoint(ref(name), { name: o.name, ...(waitS > 0 ? { timeoutS: waitS } : {}) }),
      );
      ctx.print(made, () =>
        listTable(
          made,
          [
            { header: 'NAME', value: (i) => i.name },
            { header: 'UUID', value: (i) => i.uuid },
            { header: 'STATE', value: (i) => String((i as { state?: string }).state ?? '') },
          ],
          'nothing made',
        ),
      );
    });
  examples(cmd, [
    'unihost instance checkpoint web -n web-before-upgrade',
    'unihost instance create -n web-copy --checkpoint web-before-upgrade -p 443:8080 --start',
  ]);
}
