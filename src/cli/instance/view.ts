import type { Instance, UnihostClient } from '../../client/index.js';
import { age, details, listTable, shortDigest, type Column } from '../shared/output.js';

function fqdns(i: Pick<Instance, 'service_group'>): string {
  return (i.service_group?.domains ?? []).map((d) => d.fqdn).join(',');
}

/**
 * An instance's image as a person knows it: a tag that points at its
 * digest now (the API gives the digest it is pinned to), else the digest.
 */
function imageName(digest: string, tags: Map<string, string> | undefined): string {
  return tags?.get(digest) ?? shortDigest(digest);
}

/** The instance table's columns; `tags`: a tag per image digest (imageTags). */
export const instanceColumns = (tags?: Map<string, string>): Column<Instance>[] => [
  { header: 'NAME', value: (i) => i.name },
  { header: 'STATE', value: (i) => i.state },
  { header: 'IMAGE', value: (i) => imageName(i.image, tags) },
  { header: 'MEMORY', value: (i) => `${i.memory_mb} MiB` },
  { header: 'IP', value: (i) => i.private_ip ?? '' },
  { header: 'FQDN', value: fqdns },
  { header: 'BOOT', value: (i) => (i.boot_time_us !== undefined ? `${(i.boot_time_us / 1000).toFixed(1)} ms` : '') },
  { header: 'CREATED', value: (i) => age(i.created_at) },
  { header: 'ARGS', value: (i) => i.args.join(' ') },
];

export function instancesTable(list: Instance[], tags?: Map<string, string>): string {
  return listTable(list, instanceColumns(tags), 'no instances');
}

/** The first tag of each image the caller can use, by digest (GET /v1/images/list); empty when that fails. */
export async function imageTags(client: UnihostClient): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const images = await client.images.list().catch(() => []);
  for (const im of images) if (im.tags[0]) out.set(im.digest, im.tags[0]);
  return out;
}

/** One instance as key/value lines, the most useful fields first. */
export function instanceDetails(i: Instance): string {
  const o: Record<string, unknown> = { ...i, fqdn: fqdns(i) || undefined };
  if (i.boot_time_us !== undefined) o.boot_time = `${(i.boot_time_us / 1000).toFixed(1)} ms`;
  delete o.boot_time_us;
  const first = ['uuid', 'name', 'state', 'image', 'memory_mb', 'args', 'env', 'created_at', 'fqdn', 'private_ip'];
  return details(o, [...first, ...Object.keys(o).filter((k) => !first.includes(k))]);
}
