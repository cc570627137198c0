import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { KernelImageSpec } from './build.js';

/** The metadata file `guest/build-images.sh` writes per test image (docs/guest-contract.md §5). */
export interface GuestImageMeta {
  schema: string;
  ref: string;
  kernel: string;
  initrd?: string;
  args?: string[];
  env?: Record<string, string>;
  kernel_args?: string;
  machine?: 'microvm' | 'pc';
  min_memory_mb?: number;
}

/** What imports one kernel image under a reference: the image service (src/services/images.ts). */
export interface KernelImporter<R> {
  importKernel(ref: string, spec: Omit<KernelImageSpec, 'name'>): Promise<R>;
}

/** Imports every `<app>.json` of a guest image directory as an official image; idempotent. */
export async function importGuestImages<R>(
  images: KernelImporter<R>,
  dir: string,
  /** only the images with these names (their reference without the tag, e.g. `['http', 'fetch']`); default all */
  only?: string[],
): Promise<R[]> {
  if (!existsSync(dir)) throw new Error(`${dir} does not exist: run guest/build-images.sh first`);
  const out: R[] = [];
  for (const f of readdirSync(dir)
    .filter((n) => n.endsWith('.json'))
    .sort()) {
    const meta = JSON.parse(readFileSync(join(dir, f), 'utf8')) as GuestImageMeta;
    if (meta.schema !== 'unihost-guest-image/1' || (only && !only.includes(meta.ref.split(':')[0]!))) continue;
    out.push(
      await images.importKernel(meta.ref, {
        kernel: join(dir, meta.kernel),
        initrd: meta.initrd ? join(dir, meta.initrd) : undefined,
        args: meta.args,
        env: meta.env,
        kernelArgs: meta.kernel_args,
        machine: meta.machine,
        minMemoryMb: meta.min_memory_mb,
      }),
    );
  }
  if (out.length === 0) throw new Error(`no guest image metadata (*.json) in ${dir}`);
  return out;
}
