import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { buildApi } from './api/server.js';
import { autoscaleDecisionsOf, DaemonMetrics, gatewayCountersOf } from './metrics.js';
import type { Config } from './config.js';
import { restrictFileModes } from './file-modes.js';
import type { Clock } from './clock.js';
import { pathsFor } from './paths.js';
import { createServices, type Services } from './services/index.js';
import { SqliteStore } from './store/sqlite/index.js';
import type { Store } from './store/types.js';
import type { Controller } from './reconcile/deps.js';

export type { Controller };

export interface Daemon {
  config: Config;
  store: Store;
  services: Services;
  api: FastifyInstance;
  logger: Logger;
  /** base URL the API listens on, e.g. `http://127.0.0.1:7878` */
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

/** Opens the store, wires the services, starts controllers and the API. */
export async function startDaemon(config: Config, opts: DaemonOptions = {}): Promise<Daemon> {
  const logger = opts.logger ?? pino({ level: config.logLevel });
  const https = tlsFiles(config);
  restrictFileModes(config.dataDir);
  const store = new SqliteStore(pathsFor(config.dataDir).db);
  const services = createServices(config, store, opts.clock);
  const controllers = (await opts.controllers?.(services, logger)) ?? [];
  for (const c of controllers) await c.start();
  services.controllers = controllers;
  const metrics = new DaemonMetrics(
    store,
    gatewayCountersOf(() => services.controllers),
    autoscaleDecisionsOf(() => services.controllers),
  );
  await metrics.start();
  const api = buildApi({
    services,
    logger,
    bodyLimit: config.bodyLimit,
    metrics,
    rateLimit: config.rateLimit,
    authFailures: config.authFailures,
    https,
  });
  const { host, port } = splitListen(config.listen);
  await api.listen({ host, port });
  const addr = api.server.address();
  const actualPort = typeof addr === 'object' && addr ? addr.port : port;
  const url = `${https ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${actualPort}`;
  logger.info({ url, dataDir: config.dataDir }, 'unihost API listening');
  return {
    config,
    store,
    services,
    api,
    logger,
    url,
    async close() {
      await api.close();
      metrics.stop();
      for (const c of [...controllers].reverse()) await c.stop();
      await store.close();
    },
  };
}
