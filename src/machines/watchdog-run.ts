/**
 * The host watchdog's process (src/machines/watchdog.ts starts it, detached):
 * every 200 ms it reads until when this host's VMs may run (the file its
 * agent rewrites at each lease renewal) and, past that time, kills every
 * QEMU of the data dir. A paused, cut-off or dead agent so leaves no VM
 * running beside the copy another host starts (docs/hosts.md). It ends
 * when the data dir goes, or when another watchdog took its place (the pid
 * file names another process).
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { hostVms, killVm } from './qemu/procs.js';

const [leaseFile, instancesDir, pidFile] = process.argv.slice(2) as [string, string, string];

// the newest watchdog names itself: an earlier one sees another pid and ends
writeFileSync(`${pidFile}.${process.pid}`, String(process.pid), { mode: 0o600 });
renameSync(`${pidFile}.${process.pid}`, pidFile);

function tick(): void {
  // the data dir went (a test's, a removed host's): nothing is left to guard
  if (!existsSync(dirname(leaseFile))) process.exit(0);
  try {
    if (Number(readFileSync(pidFile, 'utf8')) !== process.pid) process.exit(0);
  } catch {
    process.exit(0);
  }
  let until: number;
  try {
    until = Number(readFileSync(leaseFile, 'utf8'));
  } catch {
    return; // no lease written yet
  }
  if (!(Date.now() > until)) return;
  for (const vm of hostVms(instancesDir)) {
    process.stderr.write(`unihost watchdog: the host's lease ran out; killing VM ${vm.id} (pid ${vm.pid})\n`);
    void killVm(vm.pid, 0);
  }
}

setInterval(tick, 200);
tick();
