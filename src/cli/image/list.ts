import type { Command } from 'commander';
import { withServices } from '../admin/users.js';

/** Formats rows as columns separated by two spaces. */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n');
}

export function registerImageList(image: Command): void {
  image
    .command('list')
    .description('list every image in the store (all namespaces), with its tags')
    .option('--namespace <ns>', "only this namespace ('official' or a user name)")
    .action(async (o: { namespace?: string }) => {
      await withServices(image.opts(), async (s) => {
        const all = await s.images.all();
        const rows = [['TAG', 'DIGEST', 'SIZE', 'INITRD', 'ARGS', 'KERNEL ARGS']];
        for (const { image: i, tags } of all) {
          const shown = tags.filter((t) => o.namespace === undefined || t.namespace === o.namespace).map((t) => t.ref);
          if (shown.length === 0 && o.namespace !== undefined && i.namespace !== o.namespace) continue;
          for (const tag of shown.length > 0 ? shown : ['<none>']) {
            rows.push([tag, i.digest, String(i.size_in_bytes), i.initrd ? 'yes' : 'no', i.args, i.kernel_args]);
          }
        }
        if (rows.length === 1) console.log('no images');
        else console.log(table(rows));
      });
    });
}
