import type { Command } from 'commander';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { OFFICIAL, parseRef } from '../../services/images.js';
import { withServices } from '../admin/users.js';
import { examples } from '../shared/context.js';
import { UsageError } from '../shared/exit.js';

interface PullOpts {
  as?: string;
  creds?: string;
  tlsVerify: boolean;
  certDir?: string;
  skopeo: string;
}

/** `user/app:tag` (or `app:tag`) of a reference, from `--as` or the source without its registry host. */
function target(src: string, as: string | undefined): { repo: string; tag: string } {
  const raw = as ?? src;
  let p;
  try {
    p = parseRef(raw);
  } catch (e) {
    throw new UsageError(
      `${(e as Error).message}${as === undefined ? ': name the target with --as user/app:tag' : ''}`,
    );
  }
  if (p.namespace === '' || p.tag === null || (as !== undefined && p.digest !== null))
    throw new UsageError(`'${raw}' is not a tag reference: name the target with --as user/app:tag`);
  return { repo: p.namespace === OFFICIAL ? p.app : `${p.namespace}/${p.app}`, tag: p.tag };
}

/** Runs skopeo with its progress on our stderr. */
function skopeo(bin: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = spawn(bin, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    c.on('error', (e) => reject(new Error(`cannot run ${bin}: ${e.message} (install the Debian package skopeo)`)));
    c.on('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`skopeo could not copy the image (exit ${code})`)),
    );
  });
}

export function registerImagePull(image: Command): void {
  const cmd = image
    .command('pull <source>')
    .description(
      "copy an image from another registry into the platform's registry (and, for a unikernel, make it a platform image); on the data dir, with skopeo",
    )
    .option('--as <ref>', 'where it goes: user/app:tag or app:tag (default: the source without its registry host)')
    .option('--creds <user:password>', 'credentials for the source registry')
    .option('--no-tls-verify', 'do not verify the source registry (or use plain HTTP)')
    .option('--cert-dir <dir>', "directory with the source registry's CA certificates (*.crt)")
    .option('--skopeo <path>', 'skopeo binary', '/usr/bin/skopeo')
    .action(async (source: string, o: PullOpts) => {
      const to = target(source.replace(/^docker:\/\//, ''), o.as);
      if (!existsSync(o.skopeo)) throw new UsageError(`${o.skopeo} not found: install the Debian package skopeo`);
      await withServices(image.opts(), async (s, c) => {
        await s.registry.init();
        const tmp = mkdtempSync(join(c.dataDir, 'images', 'tmp', '.pull-'));
        try {
          const args = ['copy', '--all', '--preserve-digests', `--src-tls-verify=${o.tlsVerify}`];
          if (o.creds !== undefined) args.push('--src-creds', o.creds);
          if (o.certDir !== undefined) args.push('--src-cert-dir', o.certDir);
          await skopeo(o.skopeo, [...args, `docker://${source.replace(/^docker:\/\//, '')}`, `oci:${tmp}:pulled`]);
          const digest = await s.registry.ingestLayout(to.repo, to.tag, tmp);
          const platform = await s.store.read((tx) => tx.images.tag(`${to.repo}:${to.tag}`));
          console.log(`pulled ${source} as ${to.repo}:${to.tag}`);
          console.log(`  digest  ${digest}`);
          console.log(
            platform
              ? `  a platform image: create instances from ${to.repo}:${to.tag}`
              : '  not a unikernel for this platform: stored in the registry only',
          );
        } finally {
          rmSync(tmp, { recursive: true, force: true });
        }
      });
    });
  examples(cmd, [
    'unihost image --data-dir /var/lib/unihost pull index.unikraft.io/unikraft.org/nginx:1.25 --as nginx:1.25',
    'unihost image --data-dir /var/lib/unihost pull --no-tls-verify --creds me:secret 127.0.0.1:5000/app:1 --as alice/app:1',
  ]);
}
