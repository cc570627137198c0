import { readFileSync } from 'node:fs';
import { AgentServer, hasInstanceDir } from './agent-server.js';
import { LocalConsoles } from './machines/console-log.js';
import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { logDestination } from './log.js';
import { buildApi } from './api/server.js';
import { GatewayController } from './reconcile/gateway.js';
import { MachineController } from './reconcile/machines.js';
import { ControlSocket, controlSocketPath } from './control-socket.js';
import { DaemonMetrics } from './metrics.js';
import type { Config } from './config.js';
import { restrictFileModes } from './file-modes.js';
import type { Clock } from './clock.js';
import { pathsFor } from './paths.js';
import { createServices, type Services } from './services/index.js';
import { hostClaim, registerHost } from './services/hosts.js';
import { HostKeeper } from './reconcile/hosts.js';
import { HostLease } from './reconcile/host-lease.js';
import { startWatchdog } from './machines/watchdog.js';
import { openStore } from './store/open.js';
import type { Store } from './store/types.js';
import type { Controller } from './reconcile/deps.js';

export type { Controller };

export interface Daemon {
  config: Config;
  store: Store;
  services: Services;
  /** the controllers this process runs, in start order */
  controllers: Controller[];
  /** the API server (undefined without the api role) */
  api: FastifyInstance | undefined;
  logger: Logger;
  /** base URL the API listens on, e.g. `http://127.0.0.1:7878` ('' without the api role) */
  url: string;
  close(): Promise<void>;
}

export interface DaemonOptions {
  logger?: Logger;
  clock?: Clock;
  /** builds the background controllers; default: none (API only) */
  controllers?: (s: Services, log: Logger) => Controller[] | Promise<Controller[]>;
}

export function splitListen(listen: string): { host: string; port: number } {
  const i = listen.lastIndexOf(':');
  const host = i > 0 ? listen.slice(0, i).replace(/^\[|\]$/g, '') : '127.0.0.1';
  const port = Number(i >= 0 ? listen.slice(i + 1) : listen);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new Error(`listen address '${listen}' has no valid port`);
  return { host, port };
}

/** The API's certificate and key when TLS is configured (both or neither), read before anything starts. */
function tlsFiles(config: Config): { cert: Buffer; key: Buffer } | undefined {
  const { cert, key } = config.tls;
  if (!cert && !key) return undefined;
  if (!cert || !key) throw new Error('TLS needs both a certificate (--tls-cert) and its key (--tls-key)');
  const read = (file: string, what: string): Buffer => {
    try {
      return readFileSync(file);
    } catch (e) {
      throw new Error(`cannot read the TLS ${what} ${file}: ${(e as Error).message}`);
    }
  };
  return { cert: read(cert, 'certificate'), key: read(key, 'key') };
}

/** Removes events older than `days` (each user's newest stays); returns how many went. */
export function pruneEvents(store: Store, days: number, now: number): Promise<number> {
  const before = new Date(now - days * 86_400_000).toISOString();
  return store.tx((tx) => tx.events.prune(before));
}

/**
 * Opens the store, wires the services, registers this host (agent role),
 * starts the controllers and the API (api role). Whatever started is stopped
 * again, and the store closed, when a later step fails.
 */
export async function startDaemon(config: Config, opts: DaemonOptions = {}): Promise<Daemon> {
  const logger = opts.logger ?? pino({ level: config.logLevel }, logDestination(config.log));
  const https = tlsFiles(config);
  restrictFileModes(config.dataDir);
  const store = await openStore(config.store.url, pathsFor(config.dataDir).db, (msg, e) =>
    logger.warn({ err: e }, msg),
  );
  const started: Controller[] = [];
  let metrics: DaemonMetrics | undefined;
  let api: FastifyInstance | undefined;
  let pruner: NodeJS.Timeout | undefined;
  let control: ControlSocket | undefined;
  let agentServer: AgentServer | undefined;
  const close = async () => {
    clearInterval(pruner);
    await api?.close();
    await control?.stop();
    await agentServer?.stop();
    metrics?.stop();
    for (const c of [...started].reverse()) await c.stop();
    await store.close();
  };
  try {
    const services = createServices(config, store, opts.clock);
    // the agent takes its host's lease before anything acts on the host (docs/hosts.md)
    const ref: { machines?: MachineController } = {};
    if (config.roles.includes('agent')) {
      const claim = hostClaim(config);
      // other hosts' API servers read the console logs of this host's instances here (docs/hosts.md)
      if (config.host.address) {
        const local = new LocalConsoles((id) => services.paths.instance(id));
        agentServer = new AgentServer({
          address: config.host.address,
          port: config.host.agentPort,
          key: claim.holder,
          consoles: local,
          known: hasInstanceDir((id) => services.paths.instance(id)),
          log: logger,
        });
        claim.agentPort = await agentServer.start().catch((e: unknown) => {
          logger.warn(
            { err: e },
            'the agent server could not listen: other hosts cannot read this host’s console logs',
          );
          return null;
        });
      }
      const host = await registerHost(store, claim, services.clock);
      services.hostId = host.id;
      services.hostSlot = host.net_slot ?? 0;
      const watchdog = startWatchdog(config, store.kind, logger);
      await watchdog?.start();
      const lease = new HostLease(services, host.id, host, {
        register: () => registerHost(store, claim, services.clock),
        lost: () => void ref.machines?.fence(),
        regained: () => ref.machines?.regained(),
        renewed: watchdog && ((until) => watchdog.renewed(until)),
        ...(watchdog ? { vmsUntilFile: watchdog.file } : {}),
        log: logger,
      });
      services.lease = lease;
      await lease.start();
      started.push(lease);
    }
    if (config.roles.includes('agent') || config.roles.includes('api')) {
      const keeper = new HostKeeper(services, logger);
      await keeper.start();
      started.push(keeper);
    }
    const controllers = (await opts.controllers?.(services, logger)) ?? [];
    for (const c of controllers) {
      await c.start();
      started.push(c);
    }
    // `unihost admin backup` asks the daemon that runs this host's VMs to pause them while it copies their volumes
    const machines = controllers.find((c): c is MachineController => c instanceof MachineController);
    ref.machines = machines;
    if (machines) {
      const c = new ControlSocket(controlSocketPath(config.dataDir), machines, logger);
      // not fatal: without it a backup refuses volumes of running VMs, and says so
      await c.start().then(
        () => (control = c),
        (e: unknown) => logger.warn({ err: e }, 'the control socket could not listen (backups cannot pause VMs)'),
      );
    }
    metrics = new DaemonMetrics(store, services.figures);
    await metrics.start();
    // the events log keeps eventStreams.retentionDays (each user's newest event stays: ids go on from it)
    const prune = (): void =>
      void pruneEvents(store, config.eventStreams.retentionDays, services.clock.now()).then(
        (n) => n > 0 && logger.info({ events: n }, 'pruned old events'),
        (e: unknown) => logger.warn({ err: e }, 'pruning events failed'),
      );
    prune();
    pruner = setInterval(prune, 6 * 3600_000).unref();
    let url = '';
    if (config.roles.includes('api')) {
      api = buildApi({
        services,
        logger,
        bodyLimit: config.bodyLimit,
        metrics,
        rateLimit: config.rateLimit,
        authFailures: config.authFailures,
        eventStreamsPerUser: config.eventStreams.perUser,
        https,
      });
      const { host, port } = splitListen(config.listen);
      await api.listen({ host, port });
      const addr = api.server.address();
      const actualPort = typeof addr === 'object' && addr ? addr.port : port;
      url = `${https ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${actualPort}`;
      // the registry through the gateway (a plain-HTTP API only: HAProxy speaks HTTP to it)
      if (!https) for (const c of started) if (c instanceof GatewayController) c.publishRegistry(host, actualPort);
      logger.info({ url, dataDir: config.dataDir, store: store.kind, roles: config.roles }, 'unihost API listening');
    } else logger.info({ dataDir: config.dataDir, store: store.kind, roles: config.roles }, 'unihost running (no API)');
    return { config, store, services, controllers, api, logger, url, close };
  } catch (e) {
    await close().catch((c: unknown) => logger.warn({ err: c }, 'cleanup after a failed start failed'));
    throw e;
  }
}
