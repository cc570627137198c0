import type { Command } from 'commander';
import { err } from '../../errors.js';
import type { Config } from '../../config.js';
import { FIRMWARES, MACHINES, SHUTDOWNS, type Machine } from '../../images/kernel-type.js';
import { probeAccel } from '../../machines/qemu/accel.js';
import { qemuMachineChooser, type TrialResult } from '../../machines/qemu/choose.js';
import { decideMachine, imageBootFiles } from '../../images/boot-files.js';
import type { ImportResult } from '../../services/images.js';
import type { Services } from '../../services/index.js';
import { withServices } from '../admin/users.js';

interface ImportOpts {
  kernel?: string;
  initrd?: string;
  oci?: string;
  args?: string;
  kernelArgs?: string;
  env: string[];
  machine?: string;
  firmware?: string;
  shutdown?: string;
  port: string[];
  minMemoryMb?: string;
  kernelVersion?: string;
}

export const collect = (v: string, acc: string[]): string[] => [...acc, v];

export function parseEnv(pairs: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const p of pairs) {
    const eq = p.indexOf('=');
    if (eq <= 0) throw err('UH_INVALID', `--env '${p}' is not KEY=VALUE`);
    env[p.slice(0, eq)] = p.slice(eq + 1);
  }
  return env;
}

export function parseMachine(m: string | undefined): Machine | undefined {
  if (m === undefined || m === 'auto') return undefined;
  if (!(MACHINES as string[]).includes(m))
    throw err('UH_INVALID', `--machine must be auto or one of ${MACHINES.join(', ')}, not '${m}'`);
  return m as Machine;
}

export function parseChoice<T extends string>(
  flag: string,
  v: string | undefined,
  allowed: readonly T[],
): T | undefined {
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v))
    throw err('UH_INVALID', `--${flag} must be one of ${allowed.join(', ')}, not '${v}'`);
  return v as T;
}

export function parsePorts(ports: string[]): number[] {
  return ports.map((p) => {
    if (!/^\d{1,5}$/.test(p) || Number(p) < 1 || Number(p) > 65535)
      throw err('UH_INVALID', `--port must be a TCP port (1-65535), not '${p}'`);
    return Number(p);
  });
}

/**
 * `--machine auto` (the default) for a Unikraft (Multiboot) kernel: the image
 * names no machine, and this host's choice is made at once by the same trial
 * boots the daemon makes for a pushed image (`decideMachine`; docs/machines.md,
 * "Choosing the machine"), with each candidate's boots printed.
 */
async function chooseNow(r: ImportResult, s: Services, c: Config): Promise<void> {
  const m = c.machines;
  const accel = await probeAccel(m.accel, { qemu: m.qemu });
  const chooser = qemuMachineChooser({ qemu: m.qemu, accel, tbSizeMb: m.tbSizeMb });
  if (!(await imageBootFiles(s.paths, r.digest)).choosable) return;
  process.stderr.write('choosing the fastest machine that boots this kernel reliably...\n');
  const d = await decideMachine(s.paths, r.digest, chooser);
  if (!d) return;
  for (const t of d.trials as TrialResult[]) {
    const name = t.choice.machine === 'microvm' ? 'microvm' : `pc/${t.choice.firmware}`;
    const boots = t.boots.map((b) => (b === null ? 'x' : `${b} ms`)).join(', ');
    process.stderr.write(`  ${name.padEnd(12)} ${boots}${t.failure ? ` (${t.failure})` : ''}\n`);
  }
  r.boot = { ...r.boot, machine: d.machine, firmware: d.firmware };
}

export function parseMemory(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < 1)
    throw err('UH_INVALID', `--min-memory-mb must be a positive whole number, not '${v}'`);
  return Number(v);
}

/** Options that only make sense when packing a kernel file. */
const KERNEL_ONLY: (keyof ImportOpts)[] = [
  'initrd',
  'args',
  'kernelArgs',
  'machine',
  'firmware',
  'shutdown',
  'minMemoryMb',
  'kernelVersion',
];

function checkMode(o: ImportOpts): void {
  if ((o.kernel === undefined) === (o.oci === undefined))
    throw err('UH_INVALID', 'give exactly one of --kernel FILE or --oci PATH');
  if (o.oci !== undefined && (KERNEL_ONLY.some((k) => o[k] !== undefined) || o.env.length + o.port.length > 0)) {
    throw err(
      'UH_INVALID',
      '--oci imports the image as it is: --initrd, --args, --kernel-args, --env, --port, --machine, --firmware, --shutdown, --min-memory-mb and --kernel-version go with --kernel',
    );
  }
}

/** The packing options of `image import --kernel` and `image push`, parsed (all but the kernel and the name). */
export async function kernelOptions(o: Omit<ImportOpts, 'kernel' | 'oci'>) {
  const { splitArgs } = await import('../../services/instances-create.js');
  return {
    initrd: o.initrd,
    args: splitArgs(o.args),
    kernelArgs: o.kernelArgs,
    env: parseEnv(o.env),
    machine: parseMachine(o.machine),
    firmware: parseChoice('firmware', o.firmware, FIRMWARES),
    shutdown: parseChoice('shutdown', o.shutdown, SHUTDOWNS),
    ports: parsePorts(o.port),
    minMemoryMb: parseMemory(o.minMemoryMb),
    kernelVersion: o.kernelVersion,
  };
}

export function printImport(r: ImportResult, log: (s: string) => void = console.log): void {
  const b = r.boot;
  log(`imported ${r.ref}`);
  log(`  digest       ${r.digest}`);
  log(`  size         ${r.size_in_bytes} bytes (kernel${b.initrd ? ' + initrd' : ''})`);
  log(`  machine      ${b.machine}${b.machine === 'pc' ? ` (${b.firmware})` : ''}`);
  log(`  contract     ${b.contract === 'unikraft' ? 'unikraft (console + exit port)' : 'unihost (control channel)'}`);
  log(`  shutdown     ${b.shutdown === 'acpi' ? 'ACPI power button' : 'not honoured: a stop ends the VM at once'}`);
  if (b.ports.length > 0) log(`  ports        ${b.ports.join(', ')} (running once they accept connections)`);
  if (b.kernelArgs) log(`  kernel args  ${b.kernelArgs}`);
  if (b.args.length > 0) log(`  args         ${JSON.stringify(b.args)}`);
  for (const [k, v] of Object.entries(b.env)) log(`  env          ${k}=${v}`);
  if (b.minMemoryMb > 0) log(`  min memory   ${b.minMemoryMb} MiB`);
  if (r.previous) log(`tag ${r.ref} moved from ${r.previous}; instances created before keep running that image`);
}

export function registerImageImport(image: Command): void {
  image
    .command('import <ref>')
    .description(
      'import an image under REF (app:tag official, user/app:tag private) from a kernel file or an OCI layout',
    )
    .option('--kernel <file>', 'kernel to pack (Multiboot Unikraft kernel or PVH vmlinux)')
    .option('--initrd <file>', 'initial ramdisk to pack with the kernel')
    .option('--args <words>', 'default application arguments, split like a shell does')
    .option('--kernel-args <string>', "kernel arguments placed before the platform's")
    .option('--env <KEY=VALUE>', 'default environment variable (repeatable)', collect, [])
    .option(
      '--machine <type>',
      `QEMU machine: auto (default: Unikraft kernels are test-booted on each and the fastest reliable one is kept) or ${MACHINES.join(', ')}`,
    )
    .option('--firmware <fw>', `firmware of machine pc: ${FIRMWARES.join(' or ')}`)
    .option(
      '--shutdown <how>',
      `whether the kernel honours a shutdown request: ${SHUTDOWNS.join(' or ')} (default by kernel type)`,
    )
    .option(
      '--port <n>',
      'TCP port the application listens on (repeatable); instances are running once it accepts',
      collect,
      [],
    )
    .option('--min-memory-mb <n>', 'smallest memory the image boots with')
    .option('--kernel-version <v>', 'kernel version to record (org.unikraft.kernel.version)')
    .option('--oci <path>', "OCI image layout directory or tarball (kraftkit's unikernel layout)")
    .action(async (ref: string, o: ImportOpts) => {
      checkMode(o);
      await withServices(image.opts(), async (s, c) => {
        const r =
          o.oci !== undefined
            ? await s.images.importOci(ref, o.oci)
            : await s.images.importKernel(ref, { kernel: o.kernel!, ...(await kernelOptions(o)) });
        if (o.kernel !== undefined && (o.machine === undefined || o.machine === 'auto')) await chooseNow(r, s, c);
        printImport(r);
      });
    });
}
