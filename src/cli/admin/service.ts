import type { Command } from 'commander';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UsageError } from '../shared/exit.js';

export interface UnitOptions {
  /** the `unihost` entry script (bin/unihost.js of this checkout) */
  bin: string;
  node: string;
  dataDir: string;
  /** extra `serve` arguments (e.g. `--listen 0.0.0.0:7878`) */
  serveArgs: string[];
  /** the allocator the daemon is started with (jemalloc, when the host has it), or none: glibc's */
  preload?: string;
}

/** Debian's libjemalloc2: the daemon's allocator where it is installed (docs/operations.md, "Memory"). */
export const JEMALLOC = '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2';
/**
 * jemalloc's options for the daemon (`MALLOC_CONF`, beside the preload; scripts/up.sh repeats
 * them). Reuse freed memory up to 1024 times larger than a request: with the default (64 times),
 * the 64 KiB copies of a request body that V8 frees in bulk coalesce into extents too large to be
 * reused, and every chunk of a large upload faulted in fresh pages (docs/operations.md, "Memory").
 */
export const JEMALLOC_CONF = 'lg_extent_max_active_fit:10';

const quote = (s: string): string => (/^[\w@%+=:,./-]+$/.test(s) ? s : `"${s.replace(/(["\\$`])/g, '\\$1')}"`);

/**
 * The systemd unit of the daemon. `KillMode=process`: a stop or restart
 * ends the daemon only; VMs and HAProxy keep running and the next daemon
 * adopts them (docs/machines.md). Hardening: what the daemon does not need
 * is taken away; what it does need stays (root for taps, nftables, per-VM
 * uids and ports 80/443; writable cgroups and /sys/kernel/mm/ksm).
 */
export function renderUnit(o: UnitOptions): string {
  const exec = [o.node, o.bin, 'serve', '--data-dir', o.dataDir, ...o.serveArgs].map(quote).join(' ');
  return `# unihost daemon (written by \`unihost admin install-service\`; docs/operations.md, "Running as a service")
[Unit]
Description=unihost: unikernel hosting platform
Documentation=file://${resolve(dirname(o.bin), '..', 'docs', 'operations.md')}
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart=${exec}
${
  o.preload
    ? `# the daemon's allocator (its own: QEMU and HAProxy get the system's); glibc's malloc fragments
# under the daemon's load and its RSS creeps up (docs/operations.md, "Memory")
Environment=LD_PRELOAD=${quote(o.preload)}
Environment=MALLOC_CONF=${JEMALLOC_CONF}
`
    : ''
}Restart=on-failure
RestartSec=2
# VMs and HAProxy outlive the daemon: the next one adopts them
KillMode=process
TimeoutStopSec=30
LimitNOFILE=1048576
TasksMax=infinity
# logs go to the journal (journald rotates them: journalctl -u unihost)
StandardOutput=journal
StandardError=journal
# hardening
NoNewPrivileges=yes
ProtectSystem=full
ProtectHome=read-only
ReadWritePaths=${quote(o.dataDir)}
PrivateTmp=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectClock=yes
ProtectHostname=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictNamespaces=~user
SystemCallArchitectures=native

[Install]
WantedBy=multi-user.target
`;
}

export function registerInstallService(admin: Command): void {
  admin
    .command('install-service')
    .description(
      'write the systemd unit of the daemon (then: systemctl daemon-reload && systemctl enable --now unihost)',
    )
    .option('--unit-dir <dir>', 'where units live', '/etc/systemd/system')
    .option('--name <name>', 'unit name', 'unihost')
    .option('--print', 'print the unit instead of writing it')
    .option(
      '--serve-arg <arg>',
      'an extra argument of `unihost serve` (repeatable)',
      (v: string, a: string[]) => [...a, v],
      [],
    )
    .action((o: { unitDir: string; name: string; print?: boolean; serveArg: string[] }) => {
      if (!/^[a-z0-9][a-z0-9_.-]*$/i.test(o.name)) throw new UsageError(`--name '${o.name}' is not a unit name`);
      const here = dirname(fileURLToPath(import.meta.url));
      // src/cli/admin or dist/cli/admin: bin/ is three levels up
      const bin = resolve(here, '..', '..', '..', 'bin', 'unihost.js');
      if (!existsSync(bin)) throw new UsageError(`${bin} not found: run this from a unihost checkout`);
      const dataDir = resolve(
        admin.opts<{ dataDir?: string }>().dataDir ?? process.env.UNIHOST_DATA_DIR ?? '/var/lib/unihost',
      );
      const unit = renderUnit({
        bin,
        node: process.execPath,
        dataDir,
        serveArgs: o.serveArg,
        ...(existsSync(JEMALLOC) ? { preload: JEMALLOC } : {}),
      });
      if (o.print) return void process.stdout.write(unit);
      mkdirSync(o.unitDir, { recursive: true });
      const path = join(o.unitDir, `${o.name}.service`);
      writeFileSync(path, unit, { mode: 0o644 });
      console.log(
        `wrote ${path}\nnext: systemctl daemon-reload && systemctl enable --now ${o.name}\nlogs: journalctl -u ${o.name} -f`,
      );
    });
}
