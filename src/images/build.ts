import { stat } from 'node:fs/promises';
import { err } from '../errors.js';
import {
  detectKernelFormat,
  detectMachine,
  type Contract,
  type Firmware,
  type Machine,
  type Shutdown,
} from './kernel-type.js';
import type { BlobRef, ImageLayout } from './layout.js';
import {
  ANN,
  INITRD_PATH,
  KERNEL_PATH,
  MT,
  OUR_PLATFORM,
  sortedRecord,
  type Descriptor,
  type Manifest,
} from './oci.js';
import { writeTarLayer } from './tar-layer.js';

/** What `unihost image import --kernel` packs into an image. */
export interface KernelImageSpec {
  /** repository name written as `org.unikraft.image.name`: `app` or `user/app` */
  name: string;
  kernel: string;
  initrd?: string;
  /** default application arguments (config `Cmd`) */
  args?: string[];
  /** placed before the platform's kernel arguments */
  kernelArgs?: string;
  /** default environment (config `Env`), in this order */
  env?: Record<string, string>;
  /** detected from the kernel file when absent */
  machine?: Machine;
  /** firmware of machine `pc` (org.unihost.firmware); SeaBIOS when absent */
  firmware?: Firmware;
  /** from the kernel format when absent (org.unihost.contract) */
  contract?: Contract;
  /** whether the kernel honours shutdown requests; from the kernel format when absent */
  shutdown?: Shutdown;
  /** TCP ports the application listens on (config ExposedPorts) */
  ports?: number[];
  minMemoryMb?: number;
  kernelVersion?: string;
}

export interface BuiltImage {
  /** the manifest digest: the image digest */
  digest: string;
  machine: Machine;
}

const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;

async function requireFile(path: string, what: string): Promise<void> {
  const st = await stat(path).catch(() => undefined);
  if (!st) throw err('UH_INVALID', `${what} file ${path} does not exist`);
  if (!st.isFile()) throw err('UH_INVALID', `${what} ${path} is not a regular file`);
  if (st.size === 0) throw err('UH_INVALID', `${what} file ${path} is empty`);
}

function checkSpec(s: KernelImageSpec): void {
  for (const k of Object.keys(s.env ?? {})) {
    if (!ENV_KEY.test(k)) throw err('UH_INVALID', `environment variable name '${k}' is invalid`);
  }
  for (const p of s.ports ?? []) {
    if (!Number.isInteger(p) || p < 1 || p > 65535) throw err('UH_INVALID', `port ${p} is not a TCP port (1-65535)`);
  }
  if (s.minMemoryMb !== undefined && (!Number.isInteger(s.minMemoryMb) || s.minMemoryMb < 1)) {
    throw err('UH_INVALID', `minimum memory must be a positive whole number of MiB, not ${s.minMemoryMb}`);
  }
}

async function fileLayer(layout: ImageLayout, src: string, path: string, annotation: string): Promise<Descriptor> {
  const blob: BlobRef = await layout.putStream((out) => writeTarLayer([{ path, src }], out));
  return { mediaType: MT.layer, digest: blob.digest, size: blob.size, annotations: { [annotation]: `/${path}` } };
}

/**
 * Packs a kernel (and initrd) into an image the way kraftkit does, plus the
 * unihost annotations. Everything written depends only on the inputs (no
 * timestamps), so the same inputs always give the same digest.
 */
export async function buildKernelImage(layout: ImageLayout, s: KernelImageSpec): Promise<BuiltImage> {
  checkSpec(s);
  await requireFile(s.kernel, 'kernel');
  if (s.initrd !== undefined) await requireFile(s.initrd, 'initrd');
  const machine = s.machine ?? (await detectMachine(s.kernel));
  // A Unikraft (Multiboot) kernel without a machine given is left to each host's trial boots
  // (docs/machines.md, "Choosing the machine"): the image states only what was decided by its maker.
  const stated = s.machine ?? ((await detectKernelFormat(s.kernel)) === 'multiboot' ? undefined : machine);
  const layers = [await fileLayer(layout, s.kernel, KERNEL_PATH, ANN.kernelImage)];
  if (s.initrd !== undefined) layers.push(await fileLayer(layout, s.initrd, INITRD_PATH, ANN.kernelInitrd));

  const inner: { Cmd?: string[]; Env?: string[]; ExposedPorts?: Record<string, object> } = {};
  if (s.args && s.args.length > 0) inner.Cmd = s.args;
  const ports = [...new Set(s.ports ?? [])].sort((a, b) => a - b);
  if (ports.length > 0) inner.ExposedPorts = Object.fromEntries(ports.map((p) => [`${p}/tcp`, {}]));
  const env = Object.entries(s.env ?? {}).map(([k, v]) => `${k}=${v}`);
  if (env.length > 0) inner.Env = env;
  const config = {
    architecture: OUR_PLATFORM.architecture,
    os: OUR_PLATFORM.os,
    config: inner,
    rootfs: { type: 'layers', diff_ids: layers.map((l) => l.digest) },
  };
  const cfg = await layout.putBytes(JSON.stringify(config));

  const annotations: Record<string, string> = { [ANN.imageName]: s.name };
  if (stated) annotations[ANN.machine] = stated;
  if (s.kernelVersion) annotations[ANN.kernelVersion] = s.kernelVersion;
  if (s.kernelArgs) annotations[ANN.kernelArgs] = s.kernelArgs;
  if (s.minMemoryMb !== undefined) annotations[ANN.minMemoryMb] = String(s.minMemoryMb);
  if (s.firmware) annotations[ANN.firmware] = s.firmware;
  if (s.contract) annotations[ANN.contract] = s.contract;
  if (s.shutdown) annotations[ANN.shutdown] = s.shutdown;
  const manifest: Manifest = {
    schemaVersion: 2,
    mediaType: MT.manifest,
    config: { mediaType: MT.config, digest: cfg.digest, size: cfg.size },
    layers,
    annotations: sortedRecord(annotations),
  };
  const m = await layout.putBytes(JSON.stringify(manifest));
  await layout.addManifest({ mediaType: MT.manifest, digest: m.digest, size: m.size, platform: { ...OUR_PLATFORM } });
  return { digest: m.digest, machine };
}
