import { existsSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { err } from '../errors.js';
import { syncDir, tempName } from './fsutil.js';
import {
  bootDefaults,
  CONTRACTS,
  detectKernelFormat,
  detectMachine,
  FIRMWARES,
  MACHINES,
  SHUTDOWNS,
  type BootDefaults,
  type Firmware,
  type KernelFormat,
  type Machine,
} from './kernel-type.js';
import { ImageLayout } from './layout.js';
import {
  ANN,
  DIGEST_RE,
  INITRD_PATH,
  KERNEL_PATH,
  MANIFEST_TYPES,
  TAR_LAYER_TYPES,
  type ImageConfig,
  type Manifest,
} from './oci.js';
import { extractFiles } from './tar-layer.js';

/** What a driver needs to boot an image (the `images` part of the guest boot contract). */
export interface BootFiles extends BootDefaults {
  kernel: string;
  initrd?: string;
  /** kernel arguments of the image, before the platform's */
  kernelArgs: string;
  /** default application arguments (config Entrypoint + Cmd) */
  args: string[];
  /** default environment (config Env) */
  env: Record<string, string>;
  /** 0 when the image states no minimum */
  minMemoryMb: number;
  /** TCP ports the application listens on (config ExposedPorts): readiness is when they accept */
  ports: number[];
}

/** The metadata of an image held in the layout, from its manifest and config. */
export interface ImageInfo {
  manifest: Manifest;
  args: string[];
  env: Record<string, string>;
  kernelArgs: string;
  /** from the annotations; absent ones follow from the kernel file (bootDefaults) */
  boot: Partial<BootDefaults>;
  minMemoryMb: number;
  ports: number[];
}

export function parseEnv(list: string[] | null | undefined): Record<string, string> {
  const env: Record<string, string> = {};
  for (const kv of list ?? []) {
    const eq = kv.indexOf('=');
    if (eq > 0) env[kv.slice(0, eq)] = kv.slice(eq + 1);
  }
  return env;
}

/** TCP ports of OCI `ExposedPorts` (`"8080/tcp"`, `"8080"`); other protocols are not probed. */
export function parsePorts(exposed: Record<string, object> | null | undefined): number[] {
  const out = new Set<number>();
  for (const k of Object.keys(exposed ?? {})) {
    const m = /^(\d{1,5})(?:\/tcp)?$/i.exec(k);
    if (m && Number(m[1]) >= 1 && Number(m[1]) <= 65535) out.add(Number(m[1]));
  }
  return [...out].sort((a, b) => a - b);
}

/** An annotation that must be one of `allowed`, or absent. */
function oneOf<T extends string>(digest: string, a: Record<string, string>, key: string, allowed: readonly T[]) {
  const v = a[key];
  if (v !== undefined && !(allowed as readonly string[]).includes(v)) {
    throw err('UH_INVALID', `image ${digest}: annotation ${key}='${v}' is not one of ${allowed.join(', ')}`);
  }
  return v as T | undefined;
}

function annotationsInfo(
  digest: string,
  a: Record<string, string>,
): Pick<ImageInfo, 'kernelArgs' | 'boot' | 'minMemoryMb'> {
  const mem = a[ANN.minMemoryMb];
  if (mem !== undefined && !/^\d{1,7}$/.test(mem)) {
    throw err('UH_INVALID', `image ${digest}: annotation ${ANN.minMemoryMb}='${mem}' is not a number of MiB`);
  }
  const boot: Partial<BootDefaults> = {
    machine: oneOf(digest, a, ANN.machine, MACHINES),
    firmware: oneOf(digest, a, ANN.firmware, FIRMWARES),
    contract: oneOf(digest, a, ANN.contract, CONTRACTS),
    shutdown: oneOf(digest, a, ANN.shutdown, SHUTDOWNS),
  };
  for (const k of Object.keys(boot) as (keyof BootDefaults)[]) if (boot[k] === undefined) delete boot[k];
  return { kernelArgs: a[ANN.kernelArgs] ?? '', boot, minMemoryMb: mem ? Number(mem) : 0 };
}

/** Reads an image's manifest and config from the layout. */
export async function readImage(layout: ImageLayout, digest: string): Promise<ImageInfo> {
  // content-addressed: what a digest's manifest and config say never changes, so each boot need not read them
  const key = `${layout.root}\0${digest}`;
  const hit = infoCache.get(key);
  if (hit) return structuredClone(hit);
  const info = await readImageFiles(layout, digest);
  remember(infoCache, key, info);
  return structuredClone(info);
}

/** The format of an unpacked kernel (a file named by its image's digest: it never changes), read once. */
async function kernelFormat(kernel: string): Promise<KernelFormat | null> {
  if (formatCache.has(kernel)) return formatCache.get(kernel)!;
  const f = await detectKernelFormat(kernel);
  remember(formatCache, kernel, f);
  return f;
}
const formatCache = new Map<string, KernelFormat | null>();

/** Parsed images by layout and digest, oldest first (two blob reads cost 3-8 ms of a boot here). */
const infoCache = new Map<string, ImageInfo>();
const INFO_CACHE_MAX = 512;

/** Adds to a cache of at most INFO_CACHE_MAX entries, dropping the oldest. */
function remember<V>(cache: Map<string, V>, key: string, value: V): void {
  if (cache.size >= INFO_CACHE_MAX) cache.delete(cache.keys().next().value!);
  cache.set(key, value);
}

async function readImageFiles(layout: ImageLayout, digest: string): Promise<ImageInfo> {
  const manifest = await layout.readJson<Manifest>(digest);
  if (
    (manifest.mediaType && !MANIFEST_TYPES.includes(manifest.mediaType)) ||
    !manifest.config ||
    !Array.isArray(manifest.layers)
  ) {
    throw err('UH_INVALID', `blob ${digest} is not an image manifest`);
  }
  const config = await layout.readJson<ImageConfig>(manifest.config.digest);
  const c = config.config ?? {};
  return {
    manifest,
    args: [...(c.Entrypoint ?? []), ...(c.Cmd ?? [])],
    env: parseEnv(c.Env),
    ports: parsePorts(c.ExposedPorts),
    ...annotationsInfo(digest, manifest.annotations ?? {}),
  };
}

async function fsyncFile(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Extracts kernel and initrd from the layer blobs into `dir`, atomically:
 * into a temp dir first, then renamed. Later layers override earlier ones
 * (OCI layer semantics).
 */
async function unpack(layout: ImageLayout, digest: string, manifest: Manifest, dir: string): Promise<void> {
  await mkdir(layout.tmp, { recursive: true });
  await mkdir(layout.unpacked, { recursive: true });
  const tmp = tempName(layout.tmp, 'unpack');
  await mkdir(tmp);
  try {
    const found = new Set<string>();
    const wanted: Record<string, string> = { [KERNEL_PATH]: join(tmp, 'kernel'), [INITRD_PATH]: join(tmp, 'initrd') };
    for (const l of manifest.layers) {
      if (!TAR_LAYER_TYPES.includes(l.mediaType)) continue;
      for (const p of (await extractFiles(layout.blobPath(l.digest), wanted)).keys()) found.add(p);
    }
    if (!found.has(KERNEL_PATH)) throw err('UH_INVALID', `image ${digest} has no /${KERNEL_PATH} in its layers`);
    for (const p of found) await fsyncFile(wanted[p]!);
    await syncDir(tmp);
    await rename(tmp, dir).catch(async (e: NodeJS.ErrnoException) => {
      // Another process unpacked the same image first: its copy is as good as ours.
      if (e.code !== 'ENOTEMPTY' && e.code !== 'EEXIST') throw e;
    });
    await syncDir(layout.unpacked);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/**
 * How this host chooses a machine for a Unikraft kernel by trial boots (the
 * QEMU driver's `chooseBoot`; docs/machines.md, "Choosing the machine").
 * `vmm` names the QEMU build and accelerator: a choice made with another is
 * made again.
 */
export interface MachineChooser {
  vmm: string;
  run(
    kernel: string,
    memoryMb: number,
  ): Promise<{ choice: { machine: Machine; firmware: Firmware }; trials: unknown[] }>;
}

/** What `choice.json` beside an unpacked kernel holds. */
export interface StoredChoice {
  machine: Machine;
  firmware: Firmware;
  vmm: string;
  trials: unknown[];
  decided_at: string;
}

const choicePath = (layout: ImageLayout, digest: string): string =>
  join(layout.unpacked, digest.slice('sha256:'.length), 'choice.json');

/** The choice this host made for `digest`, if it made one with this VMM. */
export async function readChoice(
  paths: { images: string },
  digest: string,
  vmm?: string,
): Promise<StoredChoice | undefined> {
  try {
    const c = JSON.parse(await readFile(choicePath(new ImageLayout(paths.images), digest), 'utf8')) as StoredChoice;
    if (!MACHINES.includes(c.machine) || !FIRMWARES.includes(c.firmware)) return undefined;
    return vmm === undefined || c.vmm === vmm ? c : undefined;
  } catch {
    return undefined;
  }
}

/** Trial boots of one image take a few seconds (3 candidates, 3 boots each, 5 s at most per boot). */
const LOCK_STALE_MS = 60_000;

/** Decisions under way in this process: a boot that needs one joins it instead of booting trials twice. */
const deciding = new Map<string, Promise<StoredChoice>>();

/**
 * Makes this host's machine choice for image `digest` if it needs one (a
 * Multiboot kernel whose image names no machine or firmware) and has none
 * made with this VMM: trial boots, then `choice.json` written atomically.
 * Returns the choice (`fresh` when this call made it), or undefined when the
 * image needs none. Concurrent calls share one decision.
 */
export async function decideMachine(
  paths: { images: string },
  digest: string,
  chooser: MachineChooser,
): Promise<(StoredChoice & { fresh: boolean }) | undefined> {
  // an image that names its machine needs no choice: known from its manifest, without unpacking its
  // kernel (the daemon passes over every image at start; Linux images name theirs)
  const { boot } = await readImage(new ImageLayout(paths.images), digest);
  if (boot.machine || boot.firmware) return undefined;
  const files = await imageBootFiles(paths, digest);
  if (!files.choosable) return undefined;
  const known = await readChoice(paths, digest, chooser.vmm);
  if (known) return { ...known, fresh: false };
  let p = deciding.get(digest);
  if (!p) {
    p = (async () => {
      const layout = new ImageLayout(paths.images);
      const file = choicePath(layout, digest);
      // one decision per host: another process (the daemon, an `image import`) deciding the same image is waited for
      const lock = `${file}.lock`;
      for (;;) {
        const got = await open(lock, 'wx').then(
          async (fh) => (await fh.close(), true),
          (e: NodeJS.ErrnoException) => {
            if (e.code !== 'EEXIST') throw e;
            return false;
          },
        );
        if (got) break;
        const other = await readChoice(paths, digest, chooser.vmm);
        if (other) return other;
        const age = Date.now() - ((await stat(lock).catch(() => undefined))?.mtimeMs ?? 0);
        // trial boots take seconds: a lock this old was left by a process that died
        if (age > LOCK_STALE_MS) await rm(lock, { force: true });
        else await new Promise((r) => setTimeout(r, 100));
      }
      try {
        const { choice, trials } = await chooser.run(files.kernel, Math.max(files.minMemoryMb, 16));
        const c: StoredChoice = { ...choice, vmm: chooser.vmm, trials, decided_at: new Date().toISOString() };
        await mkdir(layout.tmp, { recursive: true });
        const tmp = tempName(layout.tmp, 'choice');
        await writeFile(tmp, JSON.stringify(c, null, 2) + '\n');
        await fsyncFile(tmp);
        await rename(tmp, file);
        return c;
      } finally {
        await rm(lock, { force: true });
      }
    })().finally(() => deciding.delete(digest));
    deciding.set(digest, p);
    return { ...(await p), fresh: true };
  }
  return { ...(await p), fresh: false };
}

/**
 * The files and settings to boot image `digest`, unpacking kernel and initrd
 * once into `<images>/unpacked/<hex>/`. Callable any time after the image
 * was imported; safe to call concurrently. A Unikraft kernel whose image
 * names no machine boots on this host's choice (`choice.json`); with a
 * `chooser` and no choice yet, the trial boots run first (the boot waits for
 * them), without one it boots on the detected default.
 */
export async function imageBootFiles(
  paths: { images: string },
  digest: string,
  chooser?: MachineChooser,
): Promise<BootFiles & { choosable: boolean }> {
  if (!DIGEST_RE.test(digest)) throw err('UH_INVALID', `'${digest}' is not a sha256 digest`);
  const layout = new ImageLayout(paths.images);
  const info = await readImage(layout, digest);
  const dir = join(layout.unpacked, digest.slice('sha256:'.length));
  const kernel = join(dir, 'kernel');
  // on the path of every boot: one sync stat costs microseconds, an async one a turn of the
  // thread pool (3-4 ms here while other instances start or stop)
  if (!existsSync(kernel)) await unpack(layout, digest, info.manifest, dir);
  const initrd = join(dir, 'initrd');
  const hasInitrd = existsSync(initrd);
  const b = info.boot;
  const known = b.machine && b.firmware && b.contract && b.shutdown;
  const format = known ? null : await kernelFormat(kernel);
  if (!known && !format && !b.machine) await detectMachine(kernel, `of image ${digest}`); // throws the readable error
  const choosable = format === 'multiboot' && !b.machine && !b.firmware;
  const chosen = !choosable
    ? undefined
    : ((await readChoice(paths, digest, chooser?.vmm)) ??
      (chooser ? await decideMachine(paths, digest, chooser) : undefined));
  return {
    kernel,
    ...(hasInitrd ? { initrd } : {}),
    kernelArgs: info.kernelArgs,
    args: info.args,
    env: info.env,
    ...bootDefaults(format, chosen?.machine ?? b.machine),
    ...(chosen ? { firmware: chosen.firmware } : {}),
    ...b,
    minMemoryMb: info.minMemoryMb,
    ports: info.ports,
    choosable,
  };
}
