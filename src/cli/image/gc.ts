import type { Command } from 'commander';
import { withServices } from '../admin/users.js';
import { examples } from '../shared/context.js';
import { UsageError } from '../shared/exit.js';

export function registerImageGc(image: Command): void {
  const cmd = image
    .command('gc')
    .description(
      'remove blobs nothing references (no repository, image tag, instance or import) and the untagged images only they held; on the data dir, also while the daemon runs',
    )
    .option('--grace <minutes>', 'keep files younger than this (uploads and imports about to reference them)', '60')
    .action(async (o: { grace: string }) => {
      if (!/^\d{1,6}$/.test(o.grace)) throw new UsageError(`--grace must be whole minutes, not '${o.grace}'`);
      await withServices(image.opts(), async (s) => {
        const r = await s.registry.collect(Number(o.grace) * 60_000);
        console.log(
          `removed ${r.blobs} blob${r.blobs === 1 ? '' : 's'} (${(r.bytes / 1048576).toFixed(1)} MiB) and ${r.images} untagged image${r.images === 1 ? '' : 's'}`,
        );
      });
    });
  examples(cmd, [
    'unihost image --data-dir /var/lib/unihost gc',
    'unihost image --data-dir /var/lib/unihost gc --grace 0',
  ]);
}
