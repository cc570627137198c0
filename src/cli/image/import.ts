import type { Command } from 'commander';
import { err } from '../../errors.js';
import { MACHINES, type Machine } from '../../images/kernel-type.js';
import type { ImportResult } from '../../services/images.js';
import { withServices } from '../admin/users.js';

interface ImportOpts {
  kernel?: string;
  initrd?: string;
  oci?: string;
  args?: string;
  kernelArgs?: string;
  env: string[];
  machine?: string;
  minMemoryMb?: string;
  kernelVersion?: string;
}

const collect = (v: string, acc: string[]): string[] => [...acc, v];

function parseEnv(pairs: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const p of pairs) {
    const eq = p.indexOf('=');
    if (eq <= 0) throw err('UH_INVALID', `--env '${p}' is not KEY=VALUE`);
    env[p.slice(0, eq)] = p.slice(eq + 1);
  }
  return env;
}

function parseMachine(m: string | undefined): Machine | undefined {
  if (m === undefined) return undefined;
  if (!(MACHINES as string[]).includes(m))
    throw err('UH_INVALID', `--machine must be one of ${MACHINES.join(', ')}, not '${m}'`);
  return m as Machine;
}

function parseMemory(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < 1)
    throw err('UH_INVALID', `--min-memory-mb must be a positive whole number, not '${v}'`);
  return Number(v);
}

/** Options that only make sense when packing a kernel file. */
const KERNEL_ONLY: (keyof ImportOpts)[] = ['initrd', 'args', 'kernelArgs', 'machine', 'minMemoryMb', 'kernelVersion'];

function checkMode(o: ImportOpts): void {
  if ((o.kernel === undefined) === (o.oci === undefined))
    throw err('UH_INVALID', 'give exactly one of --kernel FILE or --oci PATH');
  if (o.oci !== undefined && (KERNEL_ONLY.some((k) => o[k] !== undefined) || o.env.length > 0)) {
    throw err(
      'UH_INVALID',
      '--oci imports the image as it is: --initrd, --args, --kernel-args, --env, --machine, --min-memory-mb and --kernel-version go with --kernel',
    );
  }
}

export function printImport(r: ImportResult, log: (s: string) => void = console.log): void {
  const b = r.boot;
  log(`imported ${r.ref}`);
  log(`  digest       ${r.digest}`);
  log(`  size         ${r.size_in_bytes} bytes (kernel${b.initrd ? ' + initrd' : ''})`);
  log(`  machine      ${b.machine}`);
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
    .option('--machine <type>', `QEMU machine (${MACHINES.join(' or ')}); detected from the kernel when absent`)
    .option('--min-memory-mb <n>', 'smallest memory the image boots with')
    .option('--kernel-version <v>', 'kernel version to record (org.unikraft.kernel.version)')
    .option('--oci <path>', "OCI image layout directory or tarball (kraftkit's unikernel layout)")
    .action(async (ref: string, o: ImportOpts) => {
      checkMode(o);
      const { splitArgs } = await import('../../services/instances-create.js');
      await withServices(image.opts(), async (s) => {
        const r =
          o.oci !== undefined
            ? await s.images.importOci(ref, o.oci)
            : await s.images.importKernel(ref, {
                kernel: o.kernel!,
                initrd: o.initrd,
                args: splitArgs(o.args),
                kernelArgs: o.kernelArgs,
                env: parseEnv(o.env),
                machine: parseMachine(o.machine),
                minMemoryMb: parseMemory(o.minMemoryMb),
                kernelVersion: o.kernelVersion,
              });
        printImport(r);
      });
    });
}
