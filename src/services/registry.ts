import { createHash } from 'node:crypto';
import { rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import {
  allowed,
  checkDigest,
  OFFICIAL_NAMESPACE,
  parseReference,
  parseRepo,
  RegistryError,
  type Action,
  type Repo,
  type Scope,
} from '../domain/registry.js';
import { candidates, pickPlatform } from '../images/import-oci.js';
import { ImageLayout } from '../images/layout.js';
import { INDEX_TYPES, MANIFEST_TYPES, MT, type Descriptor, type Index, type Manifest } from '../images/oci.js';
import { UploadLimit, Uploads, type UploadMeta } from '../images/uploads.js';
import type { RegistryLinkRec, Tx, UserRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { tagKey, type ImageService, type PreparedImage } from './images.js';
import { RegistryTokens } from './registry-tokens.js';
import { effectiveQuotas } from './users.js';

const MiB = 1024 * 1024;
/** Largest manifest accepted (the distribution spec lets registries bound it; 4 MiB is what most do). */
export const MANIFEST_MAX = 4 * MiB;
const MANIFEST_MEDIA_TYPES = [...MANIFEST_TYPES, ...INDEX_TYPES];
/** Most entries of one page of tags or repositories. */
const PAGE_MAX = 1000;

/** Who asks: a user, and when the request came with a scoped token, what it grants. */
export interface Caller {
  user: UserRec;
  /** undefined: the user's own rights (HTTP Basic or an API token) */
  scopes?: Scope[];
}

export interface RegistryDeps extends ServiceBase {
  images: ImageService;
}

export interface BlobInfo {
  path: string;
  size: number;
  digest: string;
}

export interface StoredManifest {
  digest: string;
  mediaType: string;
  body: Buffer;
}

/** A page of names and, when more follow, the last one returned (for the `Link` header). */
export interface Page {
  items: string[];
  next?: string;
}

const sha256 = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** Pages a sorted list the distribution spec's way: entries after `last`, at most `n`. */
export function page(sorted: string[], n: number | undefined, last: string | undefined): Page {
  const from = last === undefined ? 0 : sorted.findIndex((x) => x > last);
  const rest = from < 0 ? [] : sorted.slice(from);
  const size = Math.min(n ?? PAGE_MAX, PAGE_MAX);
  const items = rest.slice(0, size);
  return items.length < rest.length ? { items, next: items[items.length - 1] } : { items };
}

/**
 * The OCI registry (distribution spec 1.1; docs/registry.md): repositories
 * `app` (official, written by operators) and `user/app`, content in the
 * image store's blobs, links and tags in the store. A tagged push of a
 * unikernel image also makes it an image of the platform (`user/app:tag`
 * in `GET /v1/images/list`, bootable at once).
 */
export class RegistryService {
  readonly layout: ImageLayout;
  readonly uploads: Uploads;
  readonly tokens: RegistryTokens;
  private ready: Promise<void> | undefined;

  constructor(private readonly deps: RegistryDeps) {
    this.layout = new ImageLayout(deps.paths.images);
    this.uploads = new Uploads(this.layout);
    this.tokens = new RegistryTokens(deps.config.dataDir);
  }

  /** Creates the directories on first use. */
  async init(): Promise<void> {
    this.ready ??= this.layout
      .init()
      .then(() => this.uploads.init())
      .then(() => undefined);
    return this.ready;
  }

  /**
   * Checks that `who` may do `action` in `name`. A scoped token that lacks
   * the action is UNAUTHORIZED (the client asks for a wider token); a user
   * without the right is DENIED. The detail carries the scope to ask for.
   */
  authorize(who: Caller, name: string, action: Action): Repo {
    const repo = parseRepo(name);
    const scope = `repository:${repo.name}:${action}`;
    if (who.scopes && !who.scopes.some((s) => s.repo === repo.name && s.actions.includes(action)))
      throw new RegistryError('UNAUTHORIZED', `the token does not grant ${action} on ${repo.name}`, { scope });
    if (!allowed({ name: who.user.name, operator: who.user.developer }, repo).has(action)) {
      const why =
        repo.namespace === OFFICIAL_NAMESPACE
          ? `official repositories are written by operators only`
          : `'${repo.name}' belongs to '${repo.namespace}': push under '${who.user.name}/...'`;
      throw new RegistryError('DENIED', `${action} on ${repo.name} denied: ${why}`, { scope });
    }
    return repo;
  }

  /** Narrows requested scopes to what the user may do (the token endpoint). */
  grant(user: UserRec, requested: Scope[]): Scope[] {
    return requested.map((s) => {
      const may = allowed({ name: user.name, operator: user.developer }, parseRepo(s.repo));
      return { repo: s.repo, actions: s.actions.filter((a) => may.has(a)) };
    });
  }

  // ---- blobs

  /** A blob the repository holds (manifests count: the spec lets them be fetched as blobs). */
  async blob(who: Caller, name: string, digest: string): Promise<BlobInfo> {
    const repo = this.authorize(who, name, 'pull');
    checkDigest(digest, 'digest');
    const link = await this.deps.store.read((tx) => tx.registry.getLink(repo.name, digest));
    const path = this.layout.blobPath(digest);
    const size = link ? statSync(path, { throwIfNoEntry: false })?.size : undefined;
    if (!link || size === undefined) throw new RegistryError('BLOB_UNKNOWN', `blob ${digest} is not in ${repo.name}`);
    return { path, size, digest };
  }

  async deleteBlob(who: Caller, name: string, digest: string): Promise<void> {
    const repo = this.authorize(who, name, 'delete');
    checkDigest(digest, 'digest');
    await this.deps.store.tx(async (tx) => {
      const link = await tx.registry.getLink(repo.name, digest);
      if (!link || link.media_type !== null)
        throw new RegistryError('BLOB_UNKNOWN', `blob ${digest} is not in ${repo.name}`);
      await tx.registry.unlink(repo.name, digest);
    });
  }

  /** Bytes `namespace` may still add before its `registry_mb` quota (Infinity for official repositories). */
  private async room(tx: Tx, namespace: string): Promise<number> {
    if (namespace === OFFICIAL_NAMESPACE) return Infinity;
    const user = await tx.users.getByName(namespace);
    if (!user) throw new RegistryError('NAME_UNKNOWN', `no user '${namespace}'`);
    const used = (await tx.usage(user.id)).registry_mb;
    return (effectiveQuotas(this.deps.config, user).hard.registry_mb - used) * MiB;
  }

  /** Links content into a repository inside `tx`, refusing it when it would pass the namespace's quota. */
  private async linkInTx(tx: Tx, repo: Repo, digest: string, size: number, mediaType: string | null): Promise<void> {
    await tx.lock('registry');
    const counted = await tx.registry.inNamespace(repo.namespace, digest);
    if (!counted && size > (await this.room(tx, repo.namespace))) {
      throw new RegistryError(
        'DENIED',
        `quota 'registry_mb' of '${repo.namespace}' exceeded: ${digest} (${Math.ceil(size / MiB)} MiB) does not fit; ` +
          `delete images or ask an operator to raise it`,
      );
    }
    const rec: RegistryLinkRec = {
      repo: repo.name,
      digest,
      namespace: repo.namespace,
      size,
      media_type: mediaType,
      created_at: new Date(this.deps.clock.now()).toISOString(),
    };
    await tx.registry.link(rec);
  }

  /**
   * Cross-repository mount: links a blob of `from` into `name` when the
   * caller may read `from` and it holds the blob. False: the caller must
   * upload it (the spec's fallback).
   */
  async mount(who: Caller, name: string, digest: string, from: string): Promise<boolean> {
    const repo = this.authorize(who, name, 'push');
    checkDigest(digest, "parameter 'mount'");
    try {
      this.authorize(who, from, 'pull');
    } catch {
      return false;
    }
    return this.deps.store.tx(async (tx) => {
      const src = await tx.registry.getLink(from, digest);
      if (!src || statSync(this.layout.blobPath(digest), { throwIfNoEntry: false }) === undefined) return false;
      await this.linkInTx(tx, repo, digest, src.size, src.media_type);
      return true;
    });
  }

  // ---- uploads

  async startUpload(who: Caller, name: string): Promise<UploadMeta> {
    const repo = this.authorize(who, name, 'push');
    await this.init();
    return this.uploads.create(repo.name, who.user.id, new Date(this.deps.clock.now()));
  }

  /** An upload of this caller in this repository. */
  async upload(who: Caller, name: string, id: string): Promise<{ meta: UploadMeta; size: number }> {
    const repo = this.authorize(who, name, 'push');
    const meta = await this.uploads.meta(id);
    if (!meta || meta.repo !== repo.name || meta.user !== who.user.id)
      throw new RegistryError('BLOB_UPLOAD_UNKNOWN', `no upload '${id.slice(0, 40)}' in ${repo.name}`);
    return { meta, size: await this.uploads.size(id) };
  }

  /**
   * Appends a chunk. `start` (from Content-Range) must be the size so far;
   * `length` (Content-Length), when given, must be what arrives. Returns the
   * new size. Over the quota the whole upload is dropped.
   */
  async append(
    who: Caller,
    name: string,
    id: string,
    body: Readable,
    range?: { start: number; end: number },
  ): Promise<number> {
    const { meta, size } = await this.upload(who, name, id);
    if (this.uploads.isBusy(id))
      throw new RegistryError('BLOB_UPLOAD_INVALID', `upload ${id} is already receiving a chunk`);
    if (range && range.start !== size) {
      throw new RegistryError(
        'RANGE_INVALID',
        `chunk starts at ${range.start} but the upload holds ${size} bytes: resume at ${size}`,
        { size },
      );
    }
    const repo = parseRepo(meta.repo);
    const room = await this.deps.store.read((tx) => this.room(tx, repo.namespace));
    let got: number;
    try {
      got = await this.uploads.append(id, body, room);
    } catch (e) {
      if (e instanceof UploadLimit) {
        await this.uploads.remove(id);
        throw new RegistryError(
          'DENIED',
          `quota 'registry_mb' of '${repo.namespace}' exceeded after ${Math.ceil(e.received / MiB)} MiB: upload dropped`,
        );
      }
      throw e;
    }
    if (range && got !== range.end + 1) {
      throw new RegistryError(
        'BLOB_UPLOAD_INVALID',
        `Content-Range says the chunk ends at ${range.end} but the upload now holds ${got} bytes`,
        { size: got },
      );
    }
    return got;
  }

  /** Ends an upload: the content must hash to `digest`; it becomes a blob of the repository. */
  async finish(who: Caller, name: string, id: string, digest: string): Promise<BlobInfo> {
    checkDigest(digest, "parameter 'digest'");
    const { meta } = await this.upload(who, name, id);
    const got = await this.uploads.digest(id);
    if (got.digest !== digest) {
      await this.uploads.remove(id);
      throw new RegistryError(
        'DIGEST_INVALID',
        `upload of ${got.size} bytes hashes to ${got.digest}, not ${digest}: upload dropped`,
      );
    }
    await this.uploads.flush(id);
    const repo = parseRepo(meta.repo);
    try {
      await this.deps.store.tx(async (tx) => {
        await this.linkInTx(tx, repo, digest, got.size, null);
        // In the transaction: the collector, which takes the same lock, never sees the blob unlinked.
        this.uploads.commitSync(id, digest);
      });
    } catch (e) {
      await this.uploads.remove(id);
      throw e;
    }
    await this.uploads.syncBlobs();
    return { path: this.layout.blobPath(digest), size: got.size, digest };
  }

  async cancel(who: Caller, name: string, id: string): Promise<void> {
    await this.upload(who, name, id);
    await this.uploads.remove(id);
  }

  // ---- manifests

  /** Checks a manifest document against the spec and what the repository holds; returns what it references. */
  private async checkManifest(repo: string, mediaType: string, body: Buffer): Promise<Manifest | Index> {
    let doc: Manifest | Index;
    try {
      doc = JSON.parse(body.toString('utf8')) as Manifest | Index;
    } catch (e) {
      throw new RegistryError('MANIFEST_INVALID', `manifest is not JSON: ${(e as Error).message}`);
    }
    if (typeof doc !== 'object' || doc === null || doc.schemaVersion !== 2)
      throw new RegistryError('MANIFEST_INVALID', 'manifest must be a JSON object with schemaVersion 2');
    if (doc.mediaType !== undefined && doc.mediaType !== mediaType) {
      throw new RegistryError(
        'MANIFEST_INVALID',
        `manifest says mediaType '${String(doc.mediaType)}' but was sent as '${mediaType}'`,
      );
    }
    const refs: Descriptor[] = [];
    if (MANIFEST_TYPES.includes(mediaType)) {
      const m = doc as Manifest;
      if (!m.config || !Array.isArray(m.layers))
        throw new RegistryError('MANIFEST_INVALID', 'an image manifest needs a config and a layers list');
      refs.push(m.config, ...m.layers);
    } else {
      const i = doc as Index;
      if (!Array.isArray(i.manifests)) throw new RegistryError('MANIFEST_INVALID', 'an index needs a manifests list');
      refs.push(...i.manifests);
    }
    const links = new Map(
      (await this.deps.store.read((tx) => tx.registry.links(repo))).map((l) => [l.digest, l] as const),
    );
    for (const d of refs) {
      if (typeof d !== 'object' || d === null || typeof d.digest !== 'string' || typeof d.size !== 'number')
        throw new RegistryError('MANIFEST_INVALID', 'every descriptor needs a digest and a size');
      checkDigest(d.digest, 'descriptor digest');
      const l = links.get(d.digest);
      if (!l)
        throw new RegistryError(
          'MANIFEST_BLOB_UNKNOWN',
          `manifest references ${d.digest}, which ${repo} does not hold`,
          {
            digest: d.digest,
          },
        );
      if (l.size !== d.size) {
        throw new RegistryError(
          'MANIFEST_INVALID',
          `descriptor of ${d.digest} says ${d.size} bytes; the blob has ${l.size}`,
        );
      }
    }
    return doc;
  }

  /** The manifest to boot when this one is a unikernel image for this platform (an x86_64 QEMU build), or undefined. */
  private async runnable(digest: string, mediaType: string, doc: Manifest | Index): Promise<string | undefined> {
    const desc: Descriptor = { mediaType, digest, size: 0 };
    const src = { json: <T>(d: Descriptor) => this.layout.readJson<T>(d.digest) };
    try {
      const cs = await candidates(src, MANIFEST_TYPES.includes(mediaType) ? [desc] : (doc as Index).manifests);
      const picked = pickPlatform(cs.filter((c) => c.platform.os !== undefined));
      return picked.desc.digest;
    } catch {
      return undefined; // not a unikernel for this platform: a plain registry image
    }
  }

  /**
   * Stores a manifest under a tag or its digest. A tagged unikernel image
   * (or an index holding one) is registered as a platform image at once:
   * its kernel is unpacked, and an image without a bootable kernel is
   * refused with the reason. Returns the manifest's digest.
   */
  async putManifest(
    who: Caller,
    name: string,
    reference: string,
    contentType: string | undefined,
    body: Buffer,
  ): Promise<{ digest: string; subject?: string }> {
    return this.storeManifest(this.authorize(who, name, 'push'), reference, contentType, body);
  }

  /** putManifest once the caller is authorized (also the operator's ingest of layouts). */
  private async storeManifest(
    repo: Repo,
    reference: string,
    contentType: string | undefined,
    body: Buffer,
  ): Promise<{ digest: string; subject?: string }> {
    const ref = parseReference(reference);
    const mediaType = (contentType ?? '').split(';')[0]!.trim() || this.guessType(body);
    if (!MANIFEST_MEDIA_TYPES.includes(mediaType)) {
      throw new RegistryError(
        'MANIFEST_INVALID',
        `manifest media type '${mediaType.slice(0, 100)}' is not supported: send ${MANIFEST_MEDIA_TYPES.join(', ')}`,
      );
    }
    const digest = sha256(body);
    if ('digest' in ref && ref.digest !== digest)
      throw new RegistryError('DIGEST_INVALID', `manifest hashes to ${digest}, not ${ref.digest}`);
    await this.init();
    const doc = await this.checkManifest(repo.name, mediaType, body);
    await this.layout.putBytes(body);
    let prepared: PreparedImage | undefined;
    const run = 'tag' in ref ? await this.runnable(digest, mediaType, doc) : undefined;
    if (run) {
      try {
        prepared = await this.deps.images.prepare(run);
      } catch (e) {
        throw new RegistryError(
          'MANIFEST_INVALID',
          `manifest is an x86_64 unikernel image but cannot be booted: ${(e as Error).message}`,
        );
      }
    }
    await this.deps.store.tx(async (tx) => {
      await this.linkInTx(tx, repo, digest, body.length, mediaType);
      if ('tag' in ref) {
        await tx.registry.setTag({ repo: repo.name, tag: ref.tag, digest });
        const key = tagKey(repo.namespace, repo.app, ref.tag);
        if (prepared) await this.deps.images.recordInTx(tx, { namespace: repo.namespace, key }, prepared);
        else if (await tx.images.tag(key)) await tx.images.deleteTag(key); // the tag now names a non-runnable image
      }
    });
    const subject = (doc as { subject?: Descriptor }).subject?.digest;
    return subject ? { digest, subject } : { digest };
  }

  /**
   * Stores an OCI layout (a directory) in repository `name` under `tag`, as
   * an operator: every blob copied and verified, linked (quota counted), the
   * manifests stored children first. One manifest in index.json is tagged
   * itself; several are tagged through an index of them. What `unihost image
   * pull` and `image import --oci` use. Returns the tagged digest.
   */
  async ingestLayout(name: string, tag: string, dir: string): Promise<string> {
    const repo = parseRepo(name);
    parseReference(tag);
    await this.init();
    const { readFile } = await import('node:fs/promises');
    const path = (d: string) => join(dir, 'blobs', 'sha256', checkDigest(d, 'layout digest').slice(7));
    let index: Index;
    try {
      index = JSON.parse(await readFile(join(dir, 'index.json'), 'utf8')) as Index;
    } catch {
      throw new RegistryError('MANIFEST_INVALID', `${dir} is not an OCI layout: index.json is missing or not JSON`);
    }
    if (!Array.isArray(index.manifests) || index.manifests.length === 0)
      throw new RegistryError('MANIFEST_INVALID', `${dir}: index.json lists no manifests`);
    const store = async (d: Descriptor, ref: string, depth = 0): Promise<string> => {
      if (depth > 4) throw new RegistryError('MANIFEST_INVALID', `${dir} nests indexes deeper than 4`);
      const body = await readFile(path(d.digest)).catch(() => {
        throw new RegistryError('MANIFEST_BLOB_UNKNOWN', `${dir} lacks manifest ${d.digest}`);
      });
      const doc = JSON.parse(body.toString('utf8')) as Partial<Manifest & Index>;
      if (INDEX_TYPES.includes(d.mediaType)) {
        for (const m of doc.manifests ?? []) await store(m, m.digest, depth + 1);
      } else {
        for (const b of [doc.config, ...(doc.layers ?? [])]) {
          if (!b) throw new RegistryError('MANIFEST_INVALID', `manifest ${d.digest} has no config`);
          const got = await this.layout.putFile(path(b.digest), { digest: b.digest, size: b.size });
          await this.deps.store.tx((tx) => this.linkInTx(tx, repo, got.digest, got.size, null));
        }
      }
      return (await this.storeManifest(repo, ref, d.mediaType, body)).digest;
    };
    if (index.manifests.length === 1) return store(index.manifests[0]!, tag);
    for (const m of index.manifests) await store(m, m.digest);
    const top = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT.index, manifests: index.manifests }));
    return (await this.storeManifest(repo, tag, MT.index, top)).digest;
  }

  private guessType(body: Buffer): string {
    try {
      const t = (JSON.parse(body.toString('utf8')) as { mediaType?: unknown }).mediaType;
      return typeof t === 'string' ? t : '';
    } catch {
      return '';
    }
  }

  async getManifest(who: Caller, name: string, reference: string): Promise<StoredManifest> {
    const repo = this.authorize(who, name, 'pull');
    const ref = parseReference(reference);
    const link = await this.deps.store.read(async (tx) => {
      const digest = 'digest' in ref ? ref.digest : (await tx.registry.tag(repo.name, ref.tag))?.digest;
      return digest ? tx.registry.getLink(repo.name, digest) : undefined;
    });
    if (!link || link.media_type === null)
      throw new RegistryError('MANIFEST_UNKNOWN', `manifest '${reference}' is not in ${repo.name}`);
    return { digest: link.digest, mediaType: link.media_type, body: await this.layout.readBlob(link.digest) };
  }

  /**
   * The referrers API (distribution-spec 1.1): an OCI image index of the
   * repository's manifests whose `subject` is `digest` (signatures, SBOMs,
   * attestations pushed with `OCI-Subject`), each with its `artifactType`
   * (or its config's media type) and annotations; only those of
   * `artifactType` when it is given. An unknown digest has none.
   */
  async referrers(
    who: Caller,
    name: string,
    digest: string,
    artifactType?: string,
  ): Promise<{ index: Record<string, unknown>; filtered: boolean }> {
    const repo = this.authorize(who, name, 'pull');
    checkDigest(digest, 'referrers digest');
    const links = await this.deps.store.read((tx) => tx.registry.links(repo.name));
    const manifests: Record<string, unknown>[] = [];
    for (const l of links) {
      if (!l.media_type || !MANIFEST_MEDIA_TYPES.includes(l.media_type)) continue;
      let doc: {
        subject?: Descriptor;
        artifactType?: string;
        config?: Descriptor;
        annotations?: Record<string, string>;
      };
      try {
        doc = JSON.parse((await this.layout.readBlob(l.digest)).toString('utf8')) as typeof doc;
      } catch {
        continue; // not JSON (never stored so): nothing refers
      }
      if (doc.subject?.digest !== digest) continue;
      const type = doc.artifactType ?? doc.config?.mediaType;
      if (artifactType !== undefined && type !== artifactType) continue;
      manifests.push({
        mediaType: l.media_type,
        digest: l.digest,
        size: l.size,
        ...(type ? { artifactType: type } : {}),
        ...(doc.annotations ? { annotations: doc.annotations } : {}),
      });
    }
    return {
      index: { schemaVersion: 2, mediaType: 'application/vnd.oci.image.index.v1+json', manifests },
      filtered: artifactType !== undefined,
    };
  }

  /**
   * Deletes a tag (its manifest stays, reachable by digest) or a manifest
   * by digest (with every tag on it). The platform's image tags of the
   * same names go too; instances keep the digests they run.
   */
  async deleteManifest(who: Caller, name: string, reference: string): Promise<void> {
    const repo = this.authorize(who, name, 'delete');
    const ref = parseReference(reference);
    await this.deps.store.tx(async (tx) => {
      const tags =
        'tag' in ref
          ? [await tx.registry.tag(repo.name, ref.tag)].filter((t) => t !== undefined)
          : (await tx.registry.tags(repo.name)).filter((t) => t.digest === ref.digest);
      if ('digest' in ref) {
        const link = await tx.registry.getLink(repo.name, ref.digest);
        if (!link || link.media_type === null)
          throw new RegistryError('MANIFEST_UNKNOWN', `manifest ${ref.digest} is not in ${repo.name}`);
        await tx.registry.unlink(repo.name, ref.digest);
      } else if (tags.length === 0) {
        throw new RegistryError('MANIFEST_UNKNOWN', `tag '${ref.tag}' is not in ${repo.name}`);
      }
      for (const t of tags) {
        await tx.registry.deleteTag(repo.name, t.tag);
        const key = tagKey(repo.namespace, repo.app, t.tag);
        if (await tx.images.tag(key)) await tx.images.deleteTag(key);
      }
    });
  }

  // ---- listings

  async tags(who: Caller, name: string, n?: number, last?: string): Promise<Page> {
    const repo = this.authorize(who, name, 'pull');
    const [tags, links] = await this.deps.store.read(
      async (tx) => [await tx.registry.tags(repo.name), await tx.registry.links(repo.name)] as const,
    );
    if (tags.length === 0 && links.length === 0)
      throw new RegistryError('NAME_UNKNOWN', `repository ${repo.name} is not known`);
    return page(
      tags.map((t) => t.tag),
      n,
      last,
    );
  }

  /** The repositories the caller may write: its own (operators: the official ones too). */
  async catalog(who: Caller, n?: number, last?: string): Promise<Page> {
    const links = await this.deps.store.read((tx) => tx.registry.links());
    const mine = (l: RegistryLinkRec): boolean =>
      l.namespace === who.user.name || (who.user.developer && l.namespace === OFFICIAL_NAMESPACE);
    const repos = [...new Set(links.filter(mine).map((l) => l.repo))].sort();
    return page(repos, n, last);
  }

  /**
   * The garbage collector: removes blobs of the image store that nothing
   * references (no repository links them, no platform image tag or instance
   * pins them or a manifest of theirs, no import lists them), and the
   * records of images that only they held. Files younger than `graceMs` stay
   * (an import or upload may be about to reference them). Safe while pushes
   * go on: the deletions happen in one transaction under the lock every
   * link takes, re-checked there.
   */
  async collect(graceMs = 3600_000): Promise<{ blobs: number; bytes: number; images: number }> {
    await this.init();
    const now = this.deps.clock.now();
    const roots = async (tx: Tx): Promise<Set<string>> => {
      const set = new Set<string>();
      for (const l of await tx.registry.links()) set.add(l.digest);
      for (const t of await tx.images.tags()) set.add(t.digest);
      for (const i of await tx.instances.all()) if (i.image.startsWith('sha256:')) set.add(i.image);
      for (const m of (await this.layout.index()).manifests) set.add(m.digest);
      return set;
    };
    /** everything the roots reach through manifests and indexes */
    const reach = async (from: Set<string>): Promise<Set<string>> => {
      const seen = new Set<string>();
      const walk = async (d: string, depth: number): Promise<void> => {
        if (seen.has(d) || depth > 4) return;
        seen.add(d);
        const st = statSync(this.layout.blobPath(d), { throwIfNoEntry: false });
        if (!st || st.size > MANIFEST_MAX) return;
        let doc: Partial<Manifest & Index>;
        try {
          doc = JSON.parse((await this.layout.readBlob(d)).toString('utf8')) as Partial<Manifest & Index>;
        } catch {
          return; // a layer, not a manifest
        }
        if (typeof doc !== 'object' || doc === null || doc.schemaVersion !== 2) return;
        const kids = [
          doc.config,
          ...(Array.isArray(doc.layers) ? doc.layers : []),
          ...(Array.isArray(doc.manifests) ? doc.manifests : []),
        ];
        for (const k of kids)
          if (k && typeof k.digest === 'string' && /^sha256:[0-9a-f]{64}$/.test(k.digest))
            await walk(k.digest, depth + 1);
      };
      for (const d of from) await walk(d, 0);
      return seen;
    };
    const live = await reach(await this.deps.store.read(roots));
    const { readdir, stat, rm } = await import('node:fs/promises');
    const candidates: { digest: string; size: number }[] = [];
    for (const hex of await readdir(this.layout.blobs)) {
      const digest = `sha256:${hex}`;
      if (live.has(digest) || !/^[0-9a-f]{64}$/.test(hex)) continue;
      const st = await stat(this.layout.blobPath(digest)).catch(() => undefined);
      if (st && now - st.mtimeMs > graceMs) candidates.push({ digest, size: st.size });
    }
    const r = await this.deps.store.tx(async (tx) => {
      await tx.lock('registry');
      // again, under the lock: what became referenced since the walk stays
      const again = await reach(await roots(tx));
      let blobs = 0;
      let bytes = 0;
      for (const c of candidates) {
        if (again.has(c.digest)) continue;
        rmSync(this.layout.blobPath(c.digest), { force: true });
        blobs++;
        bytes += c.size;
      }
      const gone: string[] = [];
      for (const img of await tx.images.list()) {
        if (again.has(img.digest)) continue;
        await tx.images.delete(img.digest);
        gone.push(img.digest);
      }
      return { blobs, bytes, gone };
    });
    for (const d of r.gone) await rm(join(this.layout.unpacked, d.slice(7)), { recursive: true, force: true });
    return { blobs: r.blobs, bytes: r.bytes, images: r.gone.length };
  }

  /** Removes uploads idle for longer than `maxAgeMs`. */
  async reclaimUploads(maxAgeMs: number): Promise<number> {
    await this.init();
    return this.uploads.reclaim(maxAgeMs, this.deps.clock.now());
  }
}
