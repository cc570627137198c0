import type { Command } from 'commander';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { loadConfig, parseRoles } from '../config.js';

/** What this process allocates with, as its mappings say: glibc's malloc unless another was loaded. */
export function allocator(): string {
  let maps = '';
  try {
    maps = readFileSync('/proc/self/maps', 'utf8');
  } catch {
    // not Linux: whatever the system's is
  }
  return /\/lib(jemalloc|tcmalloc|mimalloc)[^/\s]*\.so/.exec(maps)?.[1] ?? 'glibc';
}

interface ServeOpts {
  listen?: string;
  dataDir?: string;
  metro?: string;
  metroDomain?: string;
  config?: string;
  tlsCert?: string;
  tlsKey?: string;
  acmeDirectory?: string;
  store?: string;
  role?: string;
  hostAddress?: string;
  hostName?: string;
  logFile?: string;
}

/** `unihost serve`: runs the daemon in the foreground until SIGINT/SIGTERM. */
export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('run the unihost daemon (API, reconcilers, gateway) in the foreground')
    .option('--listen <host:port>', 'API listen address (env UNIHOST_LISTEN; default 127.0.0.1:7878)')
    .option('--data-dir <dir>', 'data directory (env UNIHOST_DATA_DIR; default /var/lib/unihost as root)')
    .option('--metro <code>', 'metro code shown to users (env UNIHOST_METRO; default local)')
    .option(
      '--metro-domain <domain>',
      'public domain of the metro (env UNIHOST_METRO_DOMAIN; default unihost.localhost)',
    )
    .option('--config <file>', 'JSON config file (env UNIHOST_CONFIG)')
    .option(
      '--log-file <file>',
      'log to this file, rolled every 20 MB, 5 kept (env UNIHOST_LOG_FILE; config log.*; default stdout)',
    )
    .option('--tls-cert <file>', 'serve the API over HTTPS with this PEM certificate chain (env UNIHOST_TLS_CERT)')
    .option('--tls-key <file>', 'the PEM key of --tls-cert (env UNIHOST_TLS_KEY)')
    .option(
      '--acme-directory <url>',
      "ACME directory for custom domains' certificates (env UNIHOST_ACME_DIRECTORY; default Let's Encrypt production)",
    )
    .option(
      '--store <url>',
      'the store: empty for SQLite in the data dir, or postgresql://USER@HOST/DB (env UNIHOST_STORE; docs/operations.md)',
    )
    .option(
      '--role <roles>',
      'what this process runs, comma-separated: api, agent (the host: VMs, taps, volumes, DNS), gateway (env UNIHOST_ROLE; default all three)',
    )
    .option(
      '--host-name <name>',
      "this host's name as its agent registers it (env UNIHOST_HOST_NAME; default the hostname)",
    )
    .option(
      '--host-address <ip>',
      "this host's address on the hosts' network, where other hosts reach it (env UNIHOST_HOST_ADDRESS; docs/hosts.md)",
    )
    .action(async (o: ServeOpts) => {
      const { tlsCert, tlsKey, acmeDirectory, store, role, hostName, hostAddress, logFile, ...rest } = o;
      const config = loadConfig({
        ...rest,
        ...(store !== undefined ? { store: { url: store } } : {}),
        ...(role !== undefined ? { roles: parseRoles(role, '--role') } : {}),
        ...(hostName !== undefined || hostAddress !== undefined
          ? {
              host: {
                ...(hostName !== undefined ? { name: hostName } : {}),
                ...(hostAddress !== undefined ? { address: hostAddress } : {}),
              },
            }
          : {}),
        ...(logFile !== undefined ? { log: { file: resolve(logFile) } } : {}),
        tls: { cert: tlsCert, key: tlsKey },
        ...(acmeDirectory ? { acme: { directory: acmeDirectory } } : {}),
      });
      // An allocator the daemon was started with (LD_PRELOAD: jemalloc, as scripts/up.sh and the
      // systemd unit do; docs/operations.md, "Memory") is the daemon's own: QEMU, HAProxy and the
      // tools it runs get the system's, so that their memory stays theirs and is measured as such.
      const preload = process.env.LD_PRELOAD;
      const mallocConf = process.env.MALLOC_CONF;
      delete process.env.LD_PRELOAD;
      delete process.env.MALLOC_CONF;
      // loaded here, not at the top: client commands start faster without the daemon's modules
      const { startDaemon } = await import('../daemon.js');
      const { defaultControllers } = await import('../controllers.js');
      // a misspelt driver name stops the start before anything is created in the data dir
      (await import('../drivers.js')).checkDriverNames(config);
      const d = await startDaemon(config, { controllers: defaultControllers });
      d.logger.info({ preload: preload ?? null, malloc_conf: mallocConf ?? null }, `memory allocator: ${allocator()}`);
      let closing = false;
      const shutdown = (sig: string) => {
        if (closing) return;
        closing = true;
        d.logger.info({ sig }, 'shutting down (running VMs keep running and are adopted on the next start)');
        d.close().then(
          () => process.exit(0),
          (e: unknown) => {
            d.logger.error({ err: e }, 'error during shutdown');
            process.exit(1);
          },
        );
      };
      // The daemon never dies of one stray rejected promise (a bug: logged loudly); its VMs and API carry on.
      process.on('unhandledRejection', (e) =>
        d.logger.error({ err: e }, 'unhandled rejection (a bug; the daemon carries on)'),
      );
      process.on('SIGINT', () => shutdown('SIGINT'));
      process.on('SIGTERM', () => shutdown('SIGTERM'));
    });
}
