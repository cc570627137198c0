import type { Command } from 'commander';
import { createReadStream, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { request } from 'undici';
import type { Connection } from '../../client/index.js';
import { ConnectionError } from '../../client/errors.js';
import { buildKernelImage } from '../../images/build.js';
import { FIRMWARES, SHUTDOWNS } from '../../images/kernel-type.js';
import { ImageLayout } from '../../images/layout.js';
import { MT, type Descriptor, type Index, type Manifest } from '../../images/oci.js';
import { OFFICIAL, parseRef } from '../../services/images.js';
import { ctxOf, examples } from '../shared/context.js';
import { UsageError } from '../shared/exit.js';
import { collect, kernelOptions } from './import.js';

interface PushOpts {
  initrd?: string;
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

const MiB = 1024 * 1024;
const human = (n: number): string => (n >= MiB ? `${(n / MiB).toFixed(1)} MiB` : `${n} B`);
const short = (d: string): string => d.slice(7, 19);

/** A registry answer that is not what was expected, in words (the registry's own message when it sent one). */
async function failure(what: string, r: Awaited<ReturnType<typeof request>>): Promise<Error> {
  const text = await r.body.text();
  let msg = `HTTP ${r.statusCode}`;
  try {
    const e = (JSON.parse(text) as { errors?: { code: string; message: string }[] }).errors?.[0];
    if (e) msg = `${e.code}: ${e.message}`;
  } catch {
    // not JSON: the status says it
  }
  return new Error(`${what} failed: ${msg}`);
}

/** Pushes images to the platform's registry over HTTP with the API token. */
class Pusher {
  constructor(
    private readonly conn: Connection,
    private readonly repo: string,
    private readonly log: (s: string) => void,
  ) {}

  async send(method: string, path: string, headers: Record<string, string> = {}, body?: unknown) {
    try {
      return await request(`${this.conn.baseUrl}/v2/${this.repo}${path}`, {
        method: method as 'GET',
        headers: { authorization: `Bearer ${this.conn.token}`, ...headers },
        body: body as never,
      });
    } catch (e) {
      throw new ConnectionError(this.conn.baseUrl, (e as Error).message);
    }
  }

  /** Sends one blob unless the repository has it; progress on stderr. */
  async blob(file: string, d: Descriptor): Promise<void> {
    const head = await this.send('HEAD', `/blobs/${d.digest}`);
    await head.body.dump();
    if (head.statusCode === 200) return this.log(`  ${short(d.digest)}  ${human(d.size)}  already there`);
    // any other answer (404, or a refusal whose words only a request with a body can carry): try the upload
    let sent = 0;
    let shown = 0;
    const tty = process.stderr.isTTY;
    const progress = new Transform({
      transform: (chunk: Buffer, _e, cb) => {
        sent += chunk.length;
        if (tty && sent - shown >= 4 * MiB) {
          shown = sent;
          process.stderr.write(`\r  ${short(d.digest)}  ${Math.floor((sent / d.size) * 100)}% of ${human(d.size)}`);
        }
        cb(null, chunk);
      },
    });
    const r = await this.send(
      'POST',
      `/blobs/uploads/?digest=${d.digest}`,
      { 'content-type': 'application/octet-stream', 'content-length': String(d.size) },
      createReadStream(file).pipe(progress),
    );
    if (tty) process.stderr.write('\r\x1b[K');
    if (r.statusCode !== 201) throw await failure(`pushing blob ${d.digest}`, r);
    await r.body.dump();
    this.log(`  ${short(d.digest)}  ${human(d.size)}  pushed`);
  }

  async manifest(ref: string, mediaType: string, body: Buffer): Promise<string> {
    const r = await this.send('PUT', `/manifests/${ref}`, { 'content-type': mediaType }, body);
    if (r.statusCode !== 201) throw await failure(`pushing manifest ${ref}`, r);
    await r.body.dump();
    return String(r.headers['docker-content-digest']);
  }
}

/** The manifests an OCI layout's index.json lists (nested indexes are pushed as they are). */
function layoutManifests(dir: string): Descriptor[] {
  let index: Index;
  try {
    index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as Index;
  } catch {
    throw new UsageError(`${dir} is not an OCI image layout: index.json is missing or not JSON`);
  }
  if (!Array.isArray(index.manifests) || index.manifests.length === 0)
    throw new UsageError(`${dir}: index.json lists no manifests`);
  return index.manifests;
}

/** Pushes a manifest (or index) of a layout and everything it references, children first. */
async function pushTree(p: Pusher, dir: string, d: Descriptor, ref: string): Promise<string> {
  const path = (digest: string) => join(dir, 'blobs', 'sha256', digest.slice('sha256:'.length));
  const body = readFileSync(path(d.digest));
  if (d.mediaType === MT.index || d.mediaType === MT.dockerManifestList) {
    for (const m of (JSON.parse(body.toString()) as Index).manifests) await pushTree(p, dir, m, m.digest);
  } else {
    const m = JSON.parse(body.toString()) as Manifest;
    for (const b of [m.config, ...m.layers]) await p.blob(path(b.digest), b);
  }
  return p.manifest(ref, d.mediaType, body);
}

export function registerImagePush(image: Command): void {
  const cmd = image
    .command('push <path> <ref>')
    .description(
      "push a kernel file (packed the way kraftkit packs it) or an OCI image layout directory to the platform's registry as REF (user/app:tag)",
    )
    .option('--initrd <file>', 'initial ramdisk to pack with the kernel')
    .option('--args <words>', 'default application arguments, split like a shell does')
    .option('--kernel-args <string>', "kernel arguments placed before the platform's")
    .option('--env <KEY=VALUE>', 'default environment variable (repeatable)', collect, [])
    .option('--machine <type>', 'QEMU machine: microvm or pc (default: detected from the kernel file)')
    .option('--firmware <fw>', `firmware of machine pc: ${FIRMWARES.join(' or ')}`)
    .option('--shutdown <how>', `whether the kernel honours a shutdown request: ${SHUTDOWNS.join(' or ')}`)
    .option('--port <n>', 'TCP port the application listens on (repeatable)', collect, [])
    .option('--min-memory-mb <n>', 'smallest memory the image boots with')
    .option('--kernel-version <v>', 'kernel version to record (org.unikraft.kernel.version)')
    .action(async (path: string, refArg: string, o: PushOpts, c: Command) => {
      let ref;
      try {
        ref = parseRef(refArg);
      } catch (e) {
        throw new UsageError((e as Error).message);
      }
      if (ref.namespace === '' || ref.digest !== null || ref.tag === null)
        throw new UsageError(`push needs a tag reference (user/app:tag, or app:tag as an operator), not '${refArg}'`);
      const repo = ref.namespace === OFFICIAL ? ref.app : `${ref.namespace}/${ref.app}`;
      const st = statSync(path, { throwIfNoEntry: false });
      if (!st) throw new UsageError(`${path} does not exist`);
      const isLayout = st.isDirectory() && existsSync(join(path, 'oci-layout'));
      if (st.isDirectory() && !isLayout)
        throw new UsageError(`${path} is a directory without an oci-layout file: give a kernel file or an OCI layout`);
      const kernelOpts = o.initrd ?? o.args ?? o.kernelArgs ?? o.machine ?? o.firmware ?? o.shutdown ?? o.minMemoryMb;
      if (isLayout && (kernelOpts !== undefined || o.env.length + o.port.length > 0 || o.kernelVersion))
        throw new UsageError('an OCI layout is pushed as it is: the packing options go with a kernel file');
      const ctx = ctxOf(c);
      const log = (s: string): void => void process.stderr.write(`${s}\n`);
      const p = new Pusher(ctx.client.conn, repo, log);
      const tmp = isLayout ? undefined : mkdtempSync(join(tmpdir(), 'unihost-push-'));
      try {
        let dir = path;
        let top: Descriptor;
        if (tmp) {
          const layout = await new ImageLayout(tmp).init();
          const built = await buildKernelImage(layout, { name: repo, kernel: path, ...(await kernelOptions(o)) });
          dir = tmp;
          top = { mediaType: MT.manifest, digest: built.digest, size: 0 };
          log(`packed ${path} (${built.machine})`);
        } else {
          const ms = layoutManifests(path);
          if (ms.length > 1) {
            // several images: their index goes under the tag (kraftkit's multi-platform form)
            for (const m of ms) await pushTree(p, dir, m, m.digest);
            const index = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MT.index, manifests: ms }));
            const digest = await p.manifest(ref.tag, MT.index, index);
            return ctx.print(
              { ref: `${repo}:${ref.tag}`, digest },
              () => `pushed ${repo}:${ref.tag}\n  digest  ${digest}`,
            );
          }
          top = ms[0]!;
        }
        log(`pushing to ${ctx.client.conn.baseUrl}/v2/${repo}`);
        const digest = await pushTree(p, dir, top, ref.tag);
        ctx.print({ ref: `${repo}:${ref.tag}`, digest }, () => `pushed ${repo}:${ref.tag}\n  digest  ${digest}`);
      } finally {
        if (tmp) rmSync(tmp, { recursive: true, force: true });
      }
    });
  examples(cmd, [
    'unihost image push build/app_qemu-x86_64 --port 8080 alice/app:1.0',
    'unihost image push ./oci-layout alice/app:1.0',
  ]);
}

export function registerImageDelete(image: Command): void {
  const cmd = image
    .command('delete <ref>')
    .alias('rm')
    .description("delete a tag of your repository in the platform's registry (instances keep running)")
    .action(async (refArg: string, _o: unknown, c: Command) => {
      let ref;
      try {
        ref = parseRef(refArg);
      } catch (e) {
        throw new UsageError((e as Error).message);
      }
      if (ref.namespace === '') throw new UsageError(`'${refArg}' names no repository`);
      const repo = ref.namespace === OFFICIAL ? ref.app : `${ref.namespace}/${ref.app}`;
      const ctx = ctxOf(c);
      const p = new Pusher(ctx.client.conn, repo, () => undefined);
      const what = ref.digest ?? ref.tag!;
      const r = await p.send('DELETE', `/manifests/${what}`);
      if (r.statusCode !== 202) throw await failure(`deleting ${refArg}`, r);
      await r.body.dump();
      ctx.print({ deleted: `${repo}:${what}` }, () => `deleted ${repo}${ref.digest ? '@' : ':'}${what}`);
    });
  examples(cmd, ['unihost image delete alice/app:1.0']);
}
