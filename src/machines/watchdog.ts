import { spawn } from 'node:child_process';
import { closeSync, openSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../config.js';

/** The host watchdog, as the agent holds it: started once, told each renewal's deadline. */
export interface Watchdog {
  /** `until`: wall-clock ms after which no VM of this host may run unless a later renewal says otherwise */
  renewed(until: number): void;
  /** the file `renewed` writes and the watchdog reads (others may keep it: LeaseHooks.vmsUntilFile) */
  readonly file: string;
  start(): Promise<void>;
  /** The agent stops: the watchdog stays (the lease still runs out if no agent takes it back). */
  stop(): Promise<void>;
}

/** Whether the watchdog runs: `on`, or `auto` with a shared store (PostgreSQL) and real VMs. */
export function watchdogWanted(config: Config, storeKind: string): boolean {
  if (config.host.watchdog === 'on') return true;
  return config.host.watchdog === 'auto' && storeKind === 'postgres' && config.machines.driver === 'qemu';
}

/**
 * Starts this host's watchdog (src/machines/watchdog-run.ts) as a process
 * of its own, detached, so that it acts when the agent is paused or dead.
 * A watchdog an earlier agent of the data dir left ends by itself once the
 * pid file names the new one. Returns undefined when it is not wanted.
 */
export function startWatchdog(
  config: Config,
  storeKind: string,
  log: { info(o: object, m: string): void },
): Watchdog | undefined {
  if (!watchdogWanted(config, storeKind)) return undefined;
  const leaseFile = join(config.dataDir, 'lease-until');
  const pidFile = join(config.dataDir, 'watchdog.pid');
  const instances = join(config.dataDir, 'instances');
  const write = (file: string, text: string): void => {
    writeFileSync(`${file}.tmp`, text, { mode: 0o600 });
    renameSync(`${file}.tmp`, file);
  };
  const self = fileURLToPath(import.meta.url);
  const script = self.replace(/watchdog\.(ts|js)$/, 'watchdog-run.$1');
  let pending: number | undefined;
  return {
    file: leaseFile,
    renewed(until) {
      pending = until;
      write(leaseFile, String(Math.floor(until)));
    },
    async start() {
      if (pending === undefined) write(leaseFile, String(Date.now() + config.host.leaseMs / 2));
      const err = openSync(join(config.dataDir, 'watchdog.log'), 'a', 0o600);
      const child = spawn(process.execPath, [...process.execArgv, script, leaseFile, instances, pidFile], {
        detached: true,
        stdio: ['ignore', 'ignore', err],
      });
      closeSync(err);
      if (child.pid === undefined) throw new Error('the host watchdog could not be started');
      child.unref();
      log.info({ pid: child.pid }, 'host watchdog started (it ends this host’s VMs if its lease runs out)');
    },
    async stop() {
      /* it stays: see the interface */
    },
  };
}
