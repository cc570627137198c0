import type { Command } from 'commander';
import { execFile } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync, statfsSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import { promisify } from 'node:util';
import { loadConfig, type Config } from '../config.js';
import { probeAccel } from '../machines/qemu/accel.js';
import { examples } from './shared/context.js';
import { parseFormat, render } from './shared/output.js';

const run = promisify(execFile);

export type Status = 'ok' | 'warn' | 'fail';

export interface Check {
  name: string;
  status: Status;
  detail: string;
  /** what to do about a warning or a failure */
  fix?: string;
}

/** The first line a tool prints for its version, or undefined when it cannot be run. */
async function version(cmd: string, args: string[]): Promise<string | undefined> {
  try {
    const r = await run(cmd, args, { timeout: 10_000 });
    return `${r.stdout}${r.stderr}`
      .split('\n')
      .find((l) => l.trim() !== '')
      ?.trim();
  } catch (e) {
    const x = e as { code?: string; stdout?: string; stderr?: string };
    if (x.code === 'ENOENT') return undefined;
    return `${x.stdout ?? ''}${x.stderr ?? ''}`.split('\n')[0]?.trim() || undefined;
  }
}

/** Whether something listens on host:port (true), or the port is free (false). */
function listening(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: host === '0.0.0.0' ? '127.0.0.1' : host, port, timeout: 1000 });
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
    s.once('timeout', () => (s.destroy(), resolve(false)));
  });
}

const tool = async (name: string, cmd: string, args: string[], fix: string, optional = false): Promise<Check> => {
  const v = await version(cmd, args);
  return v
    ? { name, status: 'ok', detail: v }
    : { name, status: optional ? 'warn' : 'fail', detail: `${cmd} not found`, fix };
};

/** The hosts' network must carry a guest's 1500-byte frame plus VXLAN's 50 bytes (docs/hosts.md). */
const HOSTS_MTU = 1550;

/**
 * With several hosts: the link of `host.address` carries VXLAN between the
 * hosts' bridges. `addrJson` is what `ip -j addr show` printed.
 */
export function hostsLinkCheck(addrJson: string, address: string): Check {
  const name = 'hosts network';
  const links = JSON.parse(addrJson) as { ifname: string; mtu: number; addr_info?: { local: string }[] }[];
  const l = links.find((x) => x.addr_info?.some((a) => a.local === address));
  if (!l)
    return {
      name,
      status: 'fail',
      detail: `no link of this host has host.address ${address}`,
      fix: "set host.address (--host-address) to this host's address on the hosts' network",
    };
  return l.mtu >= HOSTS_MTU
    ? { name, status: 'ok', detail: `${address} on ${l.ifname}, MTU ${l.mtu}` }
    : {
        name,
        status: 'warn',
        detail: `${address} on ${l.ifname}, MTU ${l.mtu}: guests' large packets to other hosts are lost`,
        fix: `raise the MTU of the hosts' links to ${HOSTS_MTU} or more (ip link set dev ${l.ifname} mtu ${HOSTS_MTU}, on every host)`,
      };
}

async function hostsLink(address: string): Promise<Check> {
  try {
    return hostsLinkCheck((await run('ip', ['-j', 'addr', 'show'])).stdout, address);
  } catch (e) {
    return {
      name: 'hosts network',
      status: 'warn',
      detail: `could not read the links: ${(e as Error).message}`,
      fix: 'install iproute2',
    };
  }
}

/** Every check of the host for the daemon of `config`. */
export async function runChecks(config: Config): Promise<Check[]> {
  const checks: Promise<Check>[] = [];
  const apt = (pkgs: string) => `apt-get install ${pkgs} (or ./scripts/install.sh)`;
  const major = Number(process.versions.node.split('.')[0]);
  checks.push(
    Promise.resolve<Check>(
      major >= 20
        ? { name: 'node', status: 'ok', detail: `v${process.versions.node}` }
        : { name: 'node', status: 'fail', detail: `v${process.versions.node}`, fix: 'install Node.js 20 or newer' },
    ),
  );
  const m = config.machines;
  if (m.driver === 'qemu') {
    checks.push(tool('qemu', m.qemu, ['--version'], apt('qemu-system-x86')));
    checks.push(
      (async (): Promise<Check> => {
        const why: string[] = [];
        try {
          const accel = await probeAccel(m.accel, { qemu: m.qemu, log: (s) => why.push(s) });
          return accel === 'kvm'
            ? { name: 'accelerator', status: 'ok', detail: why.join('; ') || 'kvm' }
            : {
                name: 'accelerator',
                status: 'warn',
                detail: why.join('; ') || 'tcg',
                fix: 'guests run under TCG (emulation, several times slower): enable KVM (nested virtualization, /dev/kvm access) for full speed',
              };
        } catch (e) {
          return {
            name: 'accelerator',
            status: 'fail',
            detail: (e as Error).message,
            fix: 'set machines.accel to auto',
          };
        }
      })(),
    );
  }
  checks.push(tool('ip', 'ip', ['-V'], apt('iproute2')));
  checks.push(tool('nft', 'nft', ['--version'], apt('nftables')));
  if (config.host.address) checks.push(hostsLink(config.host.address));
  checks.push(tool('mkfs.ext4', 'mkfs.ext4', ['-V'], apt('e2fsprogs')));
  if (config.gateway.enabled && config.gateway.driver === 'haproxy')
    checks.push(tool('haproxy', 'haproxy', ['-v'], apt('haproxy')));
  checks.push(tool('skopeo', 'skopeo', ['--version'], `${apt('skopeo')}: only \`unihost image pull\` needs it`, true));
  checks.push(
    Promise.resolve<Check>(
      process.getuid?.() === 0
        ? { name: 'root', status: 'ok', detail: 'running as root' }
        : {
            name: 'root',
            status: 'warn',
            detail: `running as uid ${process.getuid?.()}`,
            fix: 'the daemon needs root for taps, nftables, per-VM uids and ports 80/443: run it as root (or through the systemd unit)',
          },
    ),
  );
  checks.push(
    Promise.resolve<Check>(
      (() => {
        const dir = config.dataDir;
        if (!existsSync(dir))
          return {
            name: 'data dir',
            status: 'warn',
            detail: `${dir} does not exist yet`,
            fix: 'it is made on first start',
          };
        try {
          accessSync(dir, constants.W_OK);
        } catch {
          return { name: 'data dir', status: 'fail', detail: `${dir} is not writable`, fix: `chown or chmod ${dir}` };
        }
        const fs = statfsSync(dir);
        const freeGiB = (fs.bavail * fs.bsize) / 2 ** 30;
        const mode = (statSync(dir).mode & 0o777).toString(8);
        if (freeGiB < 2)
          return {
            name: 'data dir',
            status: 'warn',
            detail: `${dir}: ${freeGiB.toFixed(1)} GiB free`,
            fix: 'free disk space: volumes, images and console logs live here',
          };
        return { name: 'data dir', status: 'ok', detail: `${dir}: ${freeGiB.toFixed(1)} GiB free, mode ${mode}` };
      })(),
    ),
  );
  checks.push(
    Promise.resolve<Check>(
      (() => {
        const ctl = '/sys/fs/cgroup/cgroup.controllers';
        if (existsSync(ctl)) {
          const have = readFileSync(ctl, 'utf8').trim().split(/\s+/);
          const missing = ['memory', 'pids', 'cpu'].filter((c) => !have.includes(c));
          return missing.length === 0
            ? { name: 'cgroups', status: 'ok', detail: 'v2 with memory, pids and cpu: per-VM limits applied' }
            : {
                name: 'cgroups',
                status: 'warn',
                detail: `v2 without the ${missing.join(', ')} controller(s): VMs start with rlimits only`,
                fix: 'enable them in /sys/fs/cgroup/cgroup.subtree_control (or the kernel command line), docs/security.md',
              };
        }
        const v1 = ['memory', 'pids', 'cpu'].filter((c) => existsSync(`/sys/fs/cgroup/${c}/cgroup.procs`));
        if (v1.length > 0)
          return {
            name: 'cgroups',
            status: v1.length === 3 ? 'ok' : 'warn',
            detail: `v1 ${v1.join('/')} controller(s): per-VM limits applied${v1.length === 3 ? '' : ' for those only'}`,
            ...(v1.length === 3 ? {} : { fix: 'mount the missing cgroup v1 controllers (memory, pids, cpu)' }),
          };
        return { name: 'cgroups', status: 'warn', detail: 'no cgroup file system found', fix: 'mount cgroups' };
      })(),
    ),
  );
  const [host, portText] = [config.listen.slice(0, config.listen.lastIndexOf(':')), config.listen.split(':').pop()];
  const apiPort = Number(portText);
  if (apiPort > 0) {
    checks.push(
      listening(host, apiPort).then((busy): Check =>
        busy
          ? {
              name: 'api port',
              status: 'warn',
              detail: `${config.listen} is in use`,
              fix: 'a daemon already runs there (fine), or choose another --listen',
            }
          : { name: 'api port', status: 'ok', detail: `${config.listen} is free` },
      ),
    );
  }
  if (config.gateway.enabled && config.gateway.portOffset >= 0) {
    for (const p of [80, 443]) {
      const port = p + config.gateway.portOffset;
      checks.push(
        listening(config.gateway.listen, port).then((busy): Check =>
          busy
            ? {
                name: `gateway port ${p}`,
                status: 'warn',
                detail: `${config.gateway.listen}:${port} is in use`,
                fix: "the daemon's HAProxy holds it (fine), or another server does: stop it or set gateway.portOffset",
              }
            : { name: `gateway port ${p}`, status: 'ok', detail: `${config.gateway.listen}:${port} is free` },
        ),
      );
    }
  }
  return Promise.all(checks);
}

const MARK: Record<Status, string> = { ok: 'ok  ', warn: 'warn', fail: 'FAIL' };

export function registerDoctor(program: Command): void {
  const cmd = program
    .command('doctor')
    .description('check this host for the daemon: tools, accelerator, data dir, cgroups, ports; says what to fix')
    .option('--data-dir <dir>', 'data directory (env UNIHOST_DATA_DIR)')
    .option('--config <file>', 'JSON config file (env UNIHOST_CONFIG)')
    .option('-o, --output <format>', 'output format: table, json or yaml', 'table')
    .action(async (o: { dataDir?: string; config?: string; output: string }) => {
      const format = parseFormat(o.output);
      const config = loadConfig({ ...(o.dataDir ? { dataDir: o.dataDir } : {}), config: o.config });
      const checks = await runChecks(config);
      const out = render(format, checks, () =>
        checks
          .map(
            (c) =>
              `${MARK[c.status]}  ${c.name.padEnd(16)} ${c.detail}${c.fix ? `\n${' '.repeat(23)}-> ${c.fix}` : ''}`,
          )
          .join('\n'),
      );
      console.log(out);
      const failed = checks.filter((c) => c.status === 'fail').length;
      if (format === 'table') {
        const warned = checks.filter((c) => c.status === 'warn').length;
        console.log(`\n${failed} failed, ${warned} warnings, ${checks.length - failed - warned} ok`);
      }
      if (failed > 0) process.exitCode = 1;
    });
  examples(cmd, ['unihost doctor', 'unihost doctor -o json']);
}
