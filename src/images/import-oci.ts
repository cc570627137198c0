import { createHash } from 'node:crypto';
import { mkdir, readFile, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { extract } from 'tar';
import { err } from '../errors.js';
import { exists, tempName } from './fsutil.js';
import type { ImageLayout } from './layout.js';
import {
  DIGEST_RE,
  INDEX_TYPES,
  MANIFEST_TYPES,
  type Descriptor,
  type ImageConfig,
  type Index,
  type Manifest,
  type Platform,
} from './oci.js';

/** Preferred `os` of kraftkit's per-platform manifests, best first. */
const OS_PREFERENCE = ['kraftcloud', 'qemu', 'fc'];
const ARCHES = ['x86_64', 'amd64'];
/** Nested indexes deeper than this are a loop or an attack, not an image. */
const MAX_INDEX_DEPTH = 4;

/** An OCI layout being imported: a directory, read-only. */
class SourceLayout {
  /** `label` names the layout in errors (the tarball, not its temp dir) */
  constructor(
    readonly dir: string,
    readonly label: string,
  ) {}

  blobPath(digest: string): string {
    if (!DIGEST_RE.test(digest))
      throw err('UH_INVALID', `unsupported or malformed digest '${digest}' in OCI layout (only sha256 is supported)`);
    return join(this.dir, 'blobs', 'sha256', digest.slice('sha256:'.length));
  }

  /** Reads a small JSON blob, checking it against its descriptor first. */
  async json<T>(d: Descriptor): Promise<T> {
    const buf = await readFile(this.blobPath(d.digest)).catch(() => {
      throw err('UH_INVALID', `OCI layout ${this.label} lacks blob ${d.digest}`);
    });
    const got = `sha256:${createHash('sha256').update(buf).digest('hex')}`;
    if (got !== d.digest || buf.length !== d.size) {
      throw err('UH_INVALID', `corrupt blob ${d.digest}: its content (${buf.length} bytes) hashes to ${got}`);
    }
    try {
      return JSON.parse(buf.toString('utf8')) as T;
    } catch {
      throw err('UH_INVALID', `blob ${d.digest} of OCI layout ${this.label} is not valid JSON`);
    }
  }
}

async function readIndex(dir: string, label: string): Promise<Index> {
  if (!(await exists(join(dir, 'oci-layout'))))
    throw err('UH_INVALID', `${label} is not an OCI image layout: it has no oci-layout file`);
  let index: Index;
  try {
    index = JSON.parse(await readFile(join(dir, 'index.json'), 'utf8')) as Index;
  } catch {
    throw err('UH_INVALID', `${label} is not an OCI image layout: index.json is missing or not JSON`);
  }
  if (!Array.isArray(index.manifests)) throw err('UH_INVALID', `index.json of ${label} has no manifests list`);
  return index;
}

/** Where manifests and configs are read from: an OCI layout being imported, or the image store. */
export interface JsonSource {
  json<T>(d: Descriptor): Promise<T>;
}

export interface Candidate {
  desc: Descriptor;
  platform: Platform;
}

/** Every image manifest the index reaches (through nested indexes), with its platform. */
export async function candidates(src: JsonSource, manifests: Descriptor[], depth = 0): Promise<Candidate[]> {
  const out: Candidate[] = [];
  for (const d of manifests) {
    if (INDEX_TYPES.includes(d.mediaType)) {
      if (depth >= MAX_INDEX_DEPTH) throw err('UH_INVALID', `OCI layout nests indexes deeper than ${MAX_INDEX_DEPTH}`);
      out.push(...(await candidates(src, (await src.json<Index>(d)).manifests ?? [], depth + 1)));
    } else if (MANIFEST_TYPES.includes(d.mediaType)) {
      let platform = d.platform;
      if (!platform) {
        // kraftkit always sets the platform; other tools may leave it to the config.
        const cfg = await src.json<ImageConfig>((await src.json<Manifest>(d)).config);
        platform = { architecture: cfg.architecture, os: cfg.os };
      }
      out.push({ desc: d, platform });
    }
  }
  return out;
}

const describe = (p: Platform): string => `${p.os ?? '?'}/${p.architecture ?? '?'}`;

/** Picks the manifest to run: x86_64, os kraftcloud before qemu before fc. */
export function pickPlatform(cs: Candidate[]): Candidate {
  const rank = (c: Candidate): number => {
    if (c.platform.architecture !== undefined && !ARCHES.includes(c.platform.architecture)) return -1;
    if (c.platform.os === undefined) return OS_PREFERENCE.length;
    const i = OS_PREFERENCE.indexOf(c.platform.os);
    return i < 0 ? -1 : i;
  };
  const ok = cs.filter((c) => rank(c) >= 0).sort((a, b) => rank(a) - rank(b));
  if (ok.length === 0) {
    const found = cs.length ? cs.map((c) => describe(c.platform)).join(', ') : 'no image manifests';
    throw err('UH_INVALID', `OCI layout has no x86_64 image for ${OS_PREFERENCE.join(', ')} (found: ${found})`);
  }
  return ok[0]!;
}

/** Unpacks an OCI layout tarball (plain or gzip); returns the directory that holds `oci-layout`. */
async function unpackTarball(file: string, into: string): Promise<string> {
  await mkdir(into, { recursive: true });
  await extract({
    file,
    cwd: into,
    strict: true,
    // Only plain files and directories: a layout has no links, and links are how tarballs escape.
    filter: (_p, e) => 'type' in e && (e.type === 'File' || e.type === 'Directory'),
  }).catch((e: Error) => {
    throw err('UH_INVALID', `${file} is not a readable tarball: ${e.message}`);
  });
  if (await exists(join(into, 'oci-layout'))) return into;
  // Some tools wrap the layout in one top directory.
  const entries = await readdir(into);
  if (entries.length === 1 && (await exists(join(into, entries[0]!, 'oci-layout')))) return join(into, entries[0]!);
  return into;
}

async function copyImage(layout: ImageLayout, src: SourceLayout, desc: Descriptor): Promise<void> {
  const manifest = await src.json<Manifest>(desc);
  if (!manifest.config || !Array.isArray(manifest.layers))
    throw err('UH_INVALID', `manifest ${desc.digest} has no config or layers`);
  for (const d of [manifest.config, ...manifest.layers]) {
    const path = src.blobPath(d.digest);
    if (!(await exists(path))) throw err('UH_INVALID', `OCI layout ${src.label} lacks blob ${d.digest}`);
    await layout.putFile(path, { digest: d.digest, size: d.size });
  }
  await src.json<ImageConfig>(manifest.config);
  // The manifest goes last: a manifest in the store always has all its blobs.
  await layout.putFile(src.blobPath(desc.digest), { digest: desc.digest, size: desc.size });
}

/**
 * Copies the x86_64 image of an OCI layout (directory or tarball, kraftkit's
 * unikernel layout) into the store's layout, verifying every blob's digest
 * and size. The image keeps its manifest digest. Returns it.
 */
export async function importOciLayout(
  layout: ImageLayout,
  path: string,
): Promise<{ digest: string; platform: Platform }> {
  const st = await stat(path).catch(() => undefined);
  if (!st) throw err('UH_INVALID', `${path} does not exist`);
  const tmp = st.isDirectory() ? undefined : tempName(layout.tmp, 'oci');
  try {
    const dir = tmp ? await unpackTarball(path, tmp) : path;
    const src = new SourceLayout(dir, path);
    const chosen = pickPlatform(await candidates(src, (await readIndex(dir, path)).manifests));
    await copyImage(layout, src, chosen.desc);
    await layout.addManifest({
      mediaType: chosen.desc.mediaType,
      digest: chosen.desc.digest,
      size: chosen.desc.size,
      platform: chosen.platform,
    });
    return { digest: chosen.desc.digest, platform: chosen.platform };
  } finally {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
}
