import type { Command } from 'commander';
import type { Config } from '../../config.js';
import type { createServices } from '../../services/index.js';
import type { HostView } from '../../services/hosts.js';

type WithServices = <T>(o: object, fn: (s: ReturnType<typeof createServices>, c: Config) => Promise<T>) => Promise<T>;

const secs = (ms: number | null): string => (ms === null ? '-' : ms >= 0 ? `${Math.round(ms / 1000)} s` : 'ran out');

/** `unihost admin host list` as a table (or JSON with --json). */
export function hostTable(hosts: HostView[]): string {
  const rows = [
    ['NAME', 'STATE', 'ADDRESS', 'LEASE', 'EPOCH', 'MEMORY (MB)', 'VMS', 'VCPUS', 'INSTANCES', 'VOLUMES'],
    ...hosts.map((h) => [
      h.name,
      h.state,
      h.address ?? '-',
      secs(h.lease_expires_in_ms),
      String(h.epoch),
      `${h.used_memory_mb}/${h.memory_mb}`,
      String(h.vms),
      h.vcpus === null ? 'no limit' : `${h.vms}/${h.vcpus}`,
      String(h.instances),
      String(h.volumes),
    ]),
  ];
  const widths = rows[0]!.map((_, k) => Math.max(...rows.map((r) => r[k]!.length)));
  return rows
    .map((r) =>
      r
        .map((c, k) => c.padEnd(widths[k]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `unihost admin host list|cordon|uncordon|drain|remove` (docs/hosts.md). */
export function registerHosts(admin: Command, withServices: WithServices): void {
  const host = admin.command('host').description("see and manage the platform's hosts (docs/hosts.md)");
  host
    .command('list')
    .description('each host: state, lease, capacity and use, instances and volumes placed there')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      await withServices(admin.opts(), async (s) => {
        const hosts = await s.hosts.list();
        if (o.json) console.log(JSON.stringify(hosts, null, 2));
        else if (hosts.length === 0) console.log('no host yet: a daemon with the agent role registers its host');
        else console.log(hostTable(hosts));
      });
    });
  const set = (name: string, state: 'live' | 'cordoned' | 'draining', what: string) =>
    withServices(admin.opts(), async (s) => {
      const h = await s.hosts.mark(name, state);
      console.log(`host '${h.name}' ${what}`);
    });
  host
    .command('cordon <name>')
    .description('take no new instances there; what runs there stays')
    .action((name: string) => set(name, 'cordoned', 'is cordoned: it takes no new instances'));
  host
    .command('uncordon <name>')
    .description('take new instances there again (also ends a drain)')
    .action((name: string) => set(name, 'live', 'takes new instances again'));
  host
    .command('drain <name>')
    .description('move its instances to other hosts, one service group member at a time')
    .action((name: string) =>
      set(
        name,
        'draining',
        'is draining: its instances stop and start on other hosts, one group member at a time ' +
          '(follow with: unihost admin host list)',
      ),
    );
  host
    .command('remove <name>')
    .description('forget a host (refused while it runs instances, unless it is dead)')
    .action(async (name: string) => {
      await withServices(admin.opts(), async (s) => {
        await s.hosts.remove(name);
        console.log(`host '${name}' removed`);
      });
    });
}
