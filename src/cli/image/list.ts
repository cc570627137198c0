import type { Command } from 'commander';
import type { Image } from '../../client/index.js';
import { withServices } from '../admin/users.js';
import { ctxOf, examples } from '../shared/context.js';
import { listTable, shortDigest, table } from '../shared/output.js';

export function imagesTable(list: Image[]): string {
  return listTable(
    list,
    [
      { header: 'TAGS', value: (i) => i.tags.join(',') || '<none>' },
      { header: 'DIGEST', value: (i) => shortDigest(i.digest) },
      { header: 'SIZE', value: (i) => `${i.size_in_bytes} B` },
      { header: 'INITRD', value: (i) => (i.initrd ? 'yes' : 'no') },
      { header: 'ARGS', value: (i) => i.args },
    ],
    'no images',
  );
}

/** With --data-dir or --config: every image of the store (all namespaces), read from disk. */
async function storeList(o: { dataDir?: string; config?: string }, namespace: string | undefined): Promise<void> {
  await withServices(o, async (s) => {
    const all = await s.images.all();
    const rows = [['TAG', 'DIGEST', 'SIZE', 'INITRD', 'ARGS', 'KERNEL ARGS']];
    for (const { image: i, tags } of all) {
      const shown = tags.filter((t) => namespace === undefined || t.namespace === namespace).map((t) => t.ref);
      if (shown.length === 0 && namespace !== undefined && i.namespace !== namespace) continue;
      for (const tag of shown.length > 0 ? shown : ['<none>']) {
        rows.push([tag, i.digest, String(i.size_in_bytes), i.initrd ? 'yes' : 'no', i.args, i.kernel_args]);
      }
    }
    if (rows.length === 1) console.log('no images');
    else console.log(table(rows));
  });
}

export function registerImageList(image: Command): void {
  const cmd = image
    .command('list')
    .alias('ls')
    .description(
      'list the images you can use (official and your own) through the API; with --data-dir or --config, every image of the local store',
    )
    .option('--namespace <ns>', "only this namespace ('official', a user name, or user/app)")
    .action(async (o: { namespace?: string }, c: Command) => {
      const store = image.opts<{ dataDir?: string; config?: string }>();
      if (store.dataDir !== undefined || store.config !== undefined) return storeList(store, o.namespace);
      const ctx = ctxOf(c);
      const list = await ctx.client.images.list(o.namespace !== undefined ? { namespace: o.namespace } : {});
      ctx.print(list, () => imagesTable(list));
    });
  examples(cmd, [
    'unihost image list',
    'unihost image list --namespace official -o json',
    'unihost image --data-dir /var/lib/unihost list',
  ]);
}
