import { stat } from 'node:fs/promises';
import { parse as shellParse, quote } from 'shell-quote';
import { err } from '../errors.js';
import { imageBootFiles, type BootFiles } from '../images/boot-files.js';
import { buildKernelImage, type KernelImageSpec } from '../images/build.js';
import { importOciLayout } from '../images/import-oci.js';
import { ImageLayout } from '../images/layout.js';
import { publishImage } from '../images/share.js';
import { storeBlobs } from '../store/blob-share.js';
import type { ImageRec, TagRec, Tx, UserRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';

export const OFFICIAL = 'official';
const DIGEST = /^sha256:[0-9a-f]{64}$/;

export interface ParsedRef {
  /** `official` or a user name */
  namespace: string;
  app: string;
  tag: string | null;
  digest: string | null;
}

/**
 * Parses an image reference: `app[:tag]`, `user/app[:tag]`, either with
 * `@sha256:...`, or a bare `sha256:...` digest. A leading registry host
 * (`index.unikraft.io/...`, `localhost:5000/...`) is ignored, as clients
 * of the public service send one.
 */
export function parseRef(ref: string): ParsedRef {
  if (DIGEST.test(ref)) return { namespace: '', app: '', tag: null, digest: ref };
  let rest = ref;
  let digest: string | null = null;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw err('UH_INVALID', `image '${ref}': '${digest}' is not a sha256 digest`);
  }
  let parts = rest.split('/');
  if (parts.length > 1 && /[.:]|^localhost$/.test(parts[0]!)) parts = parts.slice(1);
  if (parts.length > 2 || parts.some((p) => p === ''))
    throw err('UH_INVALID', `image '${ref}' is not a valid reference`);
  let last = parts[parts.length - 1]!;
  let tag: string | null = null;
  const colon = last.indexOf(':');
  if (colon >= 0) {
    tag = last.slice(colon + 1);
    last = last.slice(0, colon);
  }
  const okName = /^[a-z0-9]+(?:[._-][a-z0-9]+)*$/;
  if (
    !okName.test(last) ||
    (parts.length === 2 && !okName.test(parts[0]!)) ||
    (tag !== null && !/^[\w][\w.-]{0,127}$/.test(tag))
  ) {
    throw err('UH_INVALID', `image '${ref}' is not a valid reference`);
  }
  return {
    namespace: parts.length === 2 ? parts[0]! : OFFICIAL,
    app: last,
    tag: digest ? tag : (tag ?? 'latest'),
    digest,
  };
}

/** The tag table key of a reference: `app:tag` for official images, `user/app:tag` for private ones. */
export const tagKey = (namespace: string, app: string, tag: string): string =>
  `${namespace === OFFICIAL ? '' : `${namespace}/`}${app}:${tag}`;

export interface ResolvedImage {
  digest: string;
  app: string;
  minMemoryMb: number;
}

/** The `namespace` filter: `<account>` or `<account>/<app>`; names are lower case like user names. */
function splitNamespace(ns: string | undefined): [string | undefined, string | undefined] {
  if (ns === undefined) return [undefined, undefined];
  const parts = ns.toLowerCase().split('/');
  if (parts.length > 2 || parts.some((x) => x === '')) {
    throw err('UH_INVALID', `parameter 'namespace': '${ns}' is not '<account>' or '<account>/<app>'`);
  }
  return [parts[0], parts[1]];
}

/**
 * The `tag` filter: a bare tag (`v1`) matches that tag in any visible
 * repository; a reference (`app:v1`, `alice/app`, defaulting to `latest`)
 * matches that tag exactly. No filter: undefined.
 */
function tagMatcher(tag: string | undefined): ((t: TagRec) => boolean) | undefined {
  if (tag === undefined) return undefined;
  if (!/[:/]/.test(tag)) return (t) => t.ref.endsWith(`:${tag}`);
  let key: string | null = null;
  try {
    const p = parseRef(tag);
    if (p.tag !== null && p.namespace !== '') key = tagKey(p.namespace, p.app, p.tag);
  } catch {
    key = null; // not a reference: matches nothing
  }
  return (t) => t.ref === key;
}

/** An image whose boot files are unpacked, ready to be recorded. */
export interface PreparedImage {
  digest: string;
  boot: BootFiles;
  /** kernel and initrd bytes */
  size: number;
}

/** What an import did. */
export interface ImportResult {
  digest: string;
  /** the tag, as stored: `app:tag` or `user/app:tag` */
  ref: string;
  /** digest the tag pointed to before, if it moved */
  previous: string | null;
  size_in_bytes: number;
  boot: BootFiles;
}

/** Images visible to users: official ones and their own namespace. */
export class ImageService {
  constructor(private readonly deps: ServiceBase) {}

  /** Checks an import target: a tag reference in `official` or an existing user's namespace. */
  private async importTarget(ref: string): Promise<{ namespace: string; app: string; key: string }> {
    const p = parseRef(ref);
    if (p.namespace === '' || p.digest !== null || p.tag === null) {
      throw err('UH_INVALID', `import needs a tag reference (app:tag or user/app:tag), not '${ref}'`);
    }
    if (p.namespace !== OFFICIAL && !(await this.deps.store.read((tx) => tx.users.getByName(p.namespace)))) {
      throw err(
        'UH_NOT_FOUND',
        `no user '${p.namespace}' (private images live under an existing user's name; official ones have no prefix)`,
      );
    }
    return { namespace: p.namespace, app: p.app, key: tagKey(p.namespace, p.app, p.tag) };
  }

  private async layout(): Promise<ImageLayout> {
    return new ImageLayout(this.deps.paths.images).init();
  }

  /**
   * Packs a kernel file (with optional initrd and defaults) into an image
   * and tags it `ref`. Re-importing a tag moves it; instances keep the digest
   * they were created with, and old blobs are never deleted.
   */
  async importKernel(ref: string, spec: Omit<KernelImageSpec, 'name'>): Promise<ImportResult> {
    const t = await this.importTarget(ref);
    const name = t.namespace === OFFICIAL ? t.app : `${t.namespace}/${t.app}`;
    const built = await buildKernelImage(await this.layout(), { ...spec, name });
    return this.register(t, built.digest);
  }

  /** Imports the x86_64 image of an OCI layout directory or tarball (kraftkit's layout) and tags it `ref`. */
  async importOci(ref: string, path: string): Promise<ImportResult> {
    const t = await this.importTarget(ref);
    const { digest } = await importOciLayout(await this.layout(), path);
    return this.register(t, digest);
  }

  /** Unpacks the boot files (so a bad image fails the import, not the first boot), then records image and tag. */
  private async register(t: { namespace: string; key: string }, digest: string): Promise<ImportResult> {
    const ready = await this.prepare(digest);
    const previous = await this.deps.store.tx(async (tx) => {
      if (t.namespace !== OFFICIAL && !(await tx.users.getByName(t.namespace)))
        throw err('UH_NOT_FOUND', `no user '${t.namespace}'`);
      return this.recordInTx(tx, { namespace: t.namespace, key: t.key }, ready);
    });
    return { digest, ref: t.key, previous, size_in_bytes: ready.size, boot: ready.boot };
  }

  /** Unpacks an image's boot files (throws when it has no bootable kernel) and measures them: the part of a registration outside the store. */
  async prepare(digest: string): Promise<PreparedImage> {
    const boot = await imageBootFiles(this.deps.paths, digest);
    // a shared store: the agents of other hosts fetch the image's content from it (docs/hosts.md, "Images")
    if (this.deps.store.kind === 'postgres')
      await publishImage(await this.layout(), digest, storeBlobs(this.deps.store));
    let size = (await stat(boot.kernel)).size;
    if (boot.initrd) size += (await stat(boot.initrd)).size;
    return { digest, boot, size };
  }

  /** Records a prepared image and points tag `key` at it; returns the digest the tag held before, if it moved. */
  async recordInTx(tx: Tx, t: { namespace: string; key: string }, p: PreparedImage): Promise<string | null> {
    const old = await tx.images.tag(t.key);
    await tx.images.upsert({
      digest: p.digest,
      namespace: t.namespace,
      size_in_bytes: p.size,
      initrd: p.boot.initrd !== undefined,
      args: quote(p.boot.args),
      kernel_args: p.boot.kernelArgs,
      min_memory_mb: p.boot.minMemoryMb,
      created_at: new Date(this.deps.clock.now()).toISOString(),
    });
    await tx.images.setTag({ ref: t.key, namespace: t.namespace, digest: p.digest });
    return old && old.digest !== p.digest ? old.digest : null;
  }

  private visible(user: UserRec, img: ImageRec, tags: TagRec[]): boolean {
    return (
      img.namespace === OFFICIAL ||
      img.namespace === user.name ||
      tags.some((t) => t.namespace === OFFICIAL || t.namespace === user.name)
    );
  }

  /** Resolves a reference to the digest it points to now (instances are pinned to it). */
  async resolve(tx: Tx, user: UserRec, ref: string): Promise<ResolvedImage> {
    const p = parseRef(ref);
    if (p.namespace !== '' && p.namespace !== OFFICIAL && p.namespace !== user.name) {
      throw err('UH_NOT_FOUND', `No image '${ref}'`);
    }
    let digest = p.digest;
    if (p.tag !== null && digest === null) {
      const t = await tx.images.tag(tagKey(p.namespace, p.app, p.tag));
      if (!t) throw err('UH_NOT_FOUND', `No image '${ref}'`);
      digest = t.digest;
    }
    const img = digest ? await tx.images.get(digest) : undefined;
    if (!img) throw err('UH_NOT_FOUND', `No image '${ref}'`);
    // Only tags the user may see: another account's tag must not name this user's instances.
    const tags = (await tx.images.tags()).filter(
      (t) => t.digest === img.digest && (t.namespace === OFFICIAL || t.namespace === user.name),
    );
    if (!this.visible(user, img, tags)) throw err('UH_NOT_FOUND', `No image '${ref}'`);
    let app = p.app;
    if (app === '') app = tags[0] ? parseRef(tags[0].ref).app : 'instance';
    return { digest: img.digest, app, minMemoryMb: img.min_memory_mb };
  }

  /** Every image with its tags, all namespaces (the admin CLI). */
  async all(): Promise<{ image: ImageRec; tags: TagRec[] }[]> {
    return this.deps.store.read(async (tx) => {
      const tags = await tx.images.tags();
      return (await tx.images.list()).map((image) => ({ image, tags: tags.filter((t) => t.digest === image.digest) }));
    });
  }

  /** GET /v1/image-store: the visible images in the SDK's `Image` model. */
  async store(user: UserRec, f: { digest?: string; tag?: string }) {
    const rows = await this.list(user, f);
    const created = new Map(
      (await this.deps.store.read((tx) => tx.images.list())).map((i) => [i.digest, i.created_at]),
    );
    return rows.map((r) => {
      const tags = r.tags as string[];
      return {
        url: tags[0] !== undefined ? `${tags[0]}@${String(r.digest)}` : String(r.digest),
        created_at: created.get(String(r.digest)) ?? '',
        initrd_or_rom: r.initrd,
        size_in_bytes: r.size_in_bytes,
        // stored shell-quoted (the v1 list's form); the store's model has words
        args: shellParse(String(r.args)).filter((w): w is string => typeof w === 'string'),
        env: {},
        tags,
      };
    });
  }

  /** GET /v1/images/list with its filters (all given must match). */
  async list(user: UserRec, f: { namespace?: string; tagged?: boolean; digest?: string; tag?: string }) {
    return this.deps.store.read(async (tx) => {
      const allTags = await tx.images.tags();
      const [nsFilter, appFilter] = splitNamespace(f.namespace);
      const tagOk = tagMatcher(f.tag);
      const out: Record<string, unknown>[] = [];
      for (const img of await tx.images.list()) {
        const tags = allTags.filter(
          (t) => t.digest === img.digest && (t.namespace === OFFICIAL || t.namespace === user.name),
        );
        if (!this.visible(user, img, tags)) continue;
        if (f.digest !== undefined && img.digest !== f.digest) continue;
        if (f.tagged && tags.length === 0) continue;
        if (nsFilter !== undefined) {
          const inNs = tags.filter(
            (t) => t.namespace === nsFilter && (appFilter === undefined || parseRef(t.ref).app === appFilter),
          );
          if (inNs.length === 0 && !(img.namespace === nsFilter && appFilter === undefined)) continue;
        }
        if (tagOk && !tags.some(tagOk)) continue;
        out.push({
          digest: img.digest,
          tags: tags.map((t) => t.ref),
          initrd: img.initrd,
          size_in_bytes: img.size_in_bytes,
          args: img.args,
          kernel_args: img.kernel_args,
        });
      }
      return out;
    });
  }
}
