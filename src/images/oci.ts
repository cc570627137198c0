/**
 * The OCI image format as unihost uses it: kraftkit's layout for unikernel
 * packages (see docs/images.md) plus a few `org.unihost.*` annotations.
 */

export const MT = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layer: 'application/vnd.oci.image.layer.v1.tar',
  layerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerManifestList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerLayerGzip: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
} as const;

export const MANIFEST_TYPES: readonly string[] = [MT.manifest, MT.dockerManifest];
export const INDEX_TYPES: readonly string[] = [MT.index, MT.dockerManifestList];
/** Layer media types whose tar content we read (node-tar detects gzip itself). */
export const TAR_LAYER_TYPES: readonly string[] = [
  MT.layer,
  MT.layerGzip,
  MT.dockerLayerGzip,
  'application/vnd.docker.image.rootfs.diff.tar',
];

export const ANN = {
  /** kraftkit: layer holding the kernel; value is its path */
  kernelImage: 'org.unikraft.kernel.image',
  /** kraftkit: layer holding the initrd; value is its path */
  kernelInitrd: 'org.unikraft.kernel.initrd',
  /** kraftkit: manifest annotation, the image's repository name */
  imageName: 'org.unikraft.image.name',
  /** kraftkit: manifest annotation, the kernel's version (when known) */
  kernelVersion: 'org.unikraft.kernel.version',
  /** unihost: kernel arguments placed before the platform's (string, shell-like words) */
  kernelArgs: 'org.unihost.kernel.args',
  /** unihost: QEMU machine type, `microvm` or `pc` */
  machine: 'org.unihost.machine',
  /** unihost: QEMU firmware for machine `pc`: `seabios` (QEMU's default) or `qboot` (faster, fewer kernels boot) */
  firmware: 'org.unihost.firmware',
  /** unihost: how the guest reports to the host, `unihost` (control channel) or `unikraft` (console + exit port) */
  contract: 'org.unihost.contract',
  /** unihost: whether the kernel honours a shutdown request (ACPI power button): `acpi` or `none` */
  shutdown: 'org.unihost.shutdown',
  /** unihost: smallest guest memory in MiB the image boots with (decimal string) */
  minMemoryMb: 'org.unihost.min-memory-mb',
  /** OCI: tag name of an index entry */
  refName: 'org.opencontainers.image.ref.name',
} as const;

export const KERNEL_PATH = 'unikraft/bin/kernel';
export const INITRD_PATH = 'unikraft/bin/initrd';

/** Platform of manifests unihost writes: what kraftkit writes for its QEMU target. */
export const OUR_PLATFORM = { architecture: 'x86_64', os: 'qemu' } as const;

export interface Platform {
  architecture?: string;
  os?: string;
  'os.version'?: string;
  'os.features'?: string[];
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: Platform;
}

export interface Index {
  schemaVersion: 2;
  mediaType?: string;
  manifests: Descriptor[];
}

export interface Manifest {
  schemaVersion: 2;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
  annotations?: Record<string, string>;
}

export interface ImageConfig {
  architecture?: string;
  os?: string;
  config?: {
    Cmd?: string[] | null;
    Entrypoint?: string[] | null;
    Env?: string[] | null;
    /** OCI: ports the application listens on, `"8080/tcp": {}` */
    ExposedPorts?: Record<string, object> | null;
  };
  rootfs?: { type: string; diff_ids: string[] };
}

export const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;

/** Key order of our own JSON is fixed by construction; annotations are sorted so equal input gives equal bytes. */
export const sortedRecord = (r: Record<string, string>): Record<string, string> =>
  Object.fromEntries(Object.entries(r).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));

/** Normalizes a tar entry path: `./unikraft/bin/kernel` and `/unikraft/bin/kernel` are the kernel too. */
export const normTarPath = (p: string): string => p.replace(/^(?:\.?\/)+/, '');
