import { err } from '../errors.js';
import type { ImageRec, TagRec, Tx, UserRec } from '../store/types.js';
import type { Deps } from './index.js';

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
  if (parts.length > 2 || parts.some((p) => p === '')) throw err('UH_INVALID', `image '${ref}' is not a valid reference`);
  let last = parts[parts.length - 1]!;
  let tag: string | null = null;
  const colon = last.indexOf(':');
  if (colon >= 0) {
    tag = last.slice(colon + 1);
    last = last.slice(0, colon);
  }
  const okName = /^[a-z0-9]+(?:[._-][a-z0-9]+)*$/;
  if (!okName.test(last) || (parts.length === 2 && !okName.test(parts[0]!)) || (tag !== null && !/^[\w][\w.-]{0,127}$/.test(tag))) {
    throw err('UH_INVALID', `image '${ref}' is not a valid reference`);
  }
  return { namespace: parts.length === 2 ? parts[0]! : OFFICIAL, app: last, tag: digest ? tag : (tag ?? 'latest'), digest };
}

/** The tag table key of a reference: `app:tag` for official images, `user/app:tag` for private ones. */
export const tagKey = (namespace: string, app: string, tag: string): string =>
  `${namespace === OFFICIAL ? '' : `${namespace}/`}${app}:${tag}`;

export interface ResolvedImage {
  digest: string;
  app: string;
  minMemoryMb: number;
}

/** Images visible to users: official ones and their own namespace. */
export class ImageService {
  constructor(private readonly deps: Deps) {}

  private visible(user: UserRec, img: ImageRec, tags: TagRec[]): boolean {
    return img.namespace === OFFICIAL || img.namespace === user.name || tags.some((t) => t.namespace === OFFICIAL || t.namespace === user.name);
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
    const tags = (await tx.images.tags()).filter((t) => t.digest === img.digest);
    if (!this.visible(user, img, tags)) throw err('UH_NOT_FOUND', `No image '${ref}'`);
    let app = p.app;
    if (app === '') app = tags[0] ? parseRef(tags[0].ref).app : 'instance';
    return { digest: img.digest, app, minMemoryMb: img.min_memory_mb };
  }

  /** GET /v1/images/list with its filters (all given must match). */
  async list(user: UserRec, f: { namespace?: string; tagged?: boolean; digest?: string; tag?: string }) {
    return this.deps.store.read(async (tx) => {
      const allTags = await tx.images.tags();
      let nsFilter: string | undefined;
      let appFilter: string | undefined;
      if (f.namespace !== undefined) [nsFilter, appFilter] = f.namespace.split('/', 2);
      const out: Record<string, unknown>[] = [];
      for (const img of await tx.images.list()) {
        const tags = allTags.filter((t) => t.digest === img.digest && (t.namespace === OFFICIAL || t.namespace === user.name));
        if (!this.visible(user, img, tags)) continue;
        if (f.digest !== undefined && img.digest !== f.digest) continue;
        if (f.tagged && tags.length === 0) continue;
        if (nsFilter !== undefined) {
          const inNs = tags.filter((t) => t.namespace === nsFilter && (appFilter === undefined || parseRef(t.ref).app === appFilter));
          if (inNs.length === 0 && !(img.namespace === nsFilter && appFilter === undefined)) continue;
        }
        if (f.tag !== undefined && !tags.some((t) => t.ref === f.tag || t.ref.endsWith(`:${f.tag}`))) continue;
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
