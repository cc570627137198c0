import type { Instance } from '../../client/index.js';
import { age, details, listTable, shortDigest, type Column } from '../shared/output.js';

function fqdns(i: Pick<Instance, 'service_group'>): string {
  return (i.service_group?.domains ?? []).map((d) => d.fqdn).join(',');
}

export const INSTANCE_COLUMNS: Column<Instance>[] = [
  { header: 'NAME', value: (i) => i.name },
  { header: 'STATE', value: (i) => i.state },
  { header: 'IMAGE', value: (i) => shortDigest(i.image) },
  { header: 'MEMORY', value: (i) => `${i.memory_mb} MiB` },
  { header: 'IP', value: (i) => i.private_ip ?? '' },
  { header: 'FQDN', value: fqdns },
  { header: 'BOOT', value: (i) => (i.boot_time_us !== undefined ? `${(i.boot_time_us / 1000).toFixed(1)} ms` : '') },
  { header: 'CREATED', value: (i) => age(i.created_at) },
  { header: 'ARGS', value: (i) => i.args.join(' ') },
];

export function instancesTable(list: Instance[]): string {
  return listTable(list, INSTANCE_COLUMNS, 'no instances');
}

/** One instance as key/value lines, the most useful fields first. */
export function instanceDetails(i: Instance): string {
  const o: Record<string, unknown> = { ...i, fqdn: fqdns(i) || undefined };
  if (i.boot_time_us !== undefined) o.boot_time = `${(i.boot_time_us / 1000).toFixed(1)} ms`;
  delete o.boot_time_us;
  const first = ['uuid', 'name', 'state', 'image', 'memory_mb', 'args', 'env', 'created_at', 'fqdn', 'private_ip'];
  return details(o, [...first, ...Object.keys(o).filter((k) => !first.includes(k))]);
}
