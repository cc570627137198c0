import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { kraftkitLayout, multibootKernel } from '../../src/images/testing/fixtures.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { runCli } from '../helpers/cli.js';
import { hasDockerRegistry, startDockerRegistry } from '../helpers/docker-registry.js';
import { requireAll, requirePart } from '../helpers/require.js';
import { simMachines } from '../helpers/sim-machines.js';

const run = promisify(execFile);
const SKOPEO = '/usr/bin/skopeo';
const skip = requirePart(!existsSync(SKOPEO) && 'skopeo (Debian package skopeo; scripts/install.sh --test)');

const sha = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** Runs skopeo; resolves with its output or rejects with its stderr. */
async function skopeo(...args: string[]): Promise<string> {
  try {
    return (await run(SKOPEO, args, { timeout: 60_000 })).stdout;
  } catch (e) {
    throw new Error(`skopeo ${args.join(' ')}: ${(e as { stderr?: string }).stderr ?? String(e)}`);
  }
}

describe('the registry with a real client (skopeo)', { skip }, () => {
  let h: Harness;
  let host: string;
  let alice: string;
  let bob: string;
  let files: string;
  let auth: string;

  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    host = new URL(h.url).host;
    alice = await h.user('alice');
    bob = await h.user('bob');
    files = mkdtempSync(join(tmpdir(), 'uh-skopeo-'));
    auth = join(files, 'auth.json');
  });
  after(async () => {
    await h.close();
    rmSync(files, { recursive: true, force: true });
  });

  test('skopeo logs in with the user name and API token', async () => {
    const out = await skopeo('login', '--tls-verify=false', '--authfile', auth, '-u', 'alice', '-p', alice, host);
    assert.match(out, /Login Succeeded/);
    await assert.rejects(
      skopeo('login', '--tls-verify=false', '--authfile', join(files, 'x.json'), '-u', 'alice', '-p', 'wrong', host),
      /401|unauthorized|invalid/i,
    );
  });

  test('an OCI layout goes in and comes back out with equal digests, and the image boots', async () => {
    const src = join(files, 'src');
    const { digests } = await kraftkitLayout(src, [
      { os: 'qemu', architecture: 'x86_64', kernel: multibootKernel('skopeo pushed'), gzip: true },
    ]);
    await skopeo(
      'copy',
      '--preserve-digests',
      '--dest-tls-verify=false',
      '--authfile',
      auth,
      `oci:${src}`,
      `docker://${host}/alice/app:1.0`,
    );
    const tag = await h.daemon.store.read((tx) => tx.images.tag('alice/app:1.0'));
    assert.equal(tag?.digest, digests[0], 'the pushed manifest is the platform image alice/app:1.0');
    const raw = await skopeo(
      'inspect',
      '--raw',
      '--tls-verify=false',
      '--authfile',
      auth,
      `docker://${host}/alice/app:1.0`,
    );
    assert.equal(sha(Buffer.from(raw)), digests[0]);
    const back = join(files, 'back');
    await skopeo(
      'copy',
      '--src-tls-verify=false',
      '--authfile',
      auth,
      `docker://${host}/alice/app:1.0`,
      `oci:${back}:1.0`,
    );
    const index = JSON.parse(readFileSync(join(back, 'index.json'), 'utf8')) as { manifests: { digest: string }[] };
    assert.equal(index.manifests[0]!.digest, digests[0]);
    const tags = JSON.parse(
      await skopeo('list-tags', '--tls-verify=false', '--authfile', auth, `docker://${host}/alice/app`),
    ) as { Tags: string[] };
    assert.deepEqual(tags.Tags, ['1.0']);
    const inst = await h.call('POST', '/v1/instances', alice, { image: 'alice/app:1.0', autostart: true });
    assert.equal(inst.status, 200, inst.text);
  });

  test("a second user's push into the first user's namespace is refused", async () => {
    const src = join(files, 'bob');
    await kraftkitLayout(src, [{ os: 'qemu', architecture: 'x86_64', kernel: multibootKernel('bob') }]);
    await assert.rejects(
      skopeo(
        'copy',
        '--dest-tls-verify=false',
        '--dest-creds',
        `bob:${bob}`,
        `oci:${src}`,
        `docker://${host}/alice/app:evil`,
      ),
      /denied|unauthorized|403/i,
    );
    assert.equal(await h.daemon.store.read((tx) => tx.registry.tag('alice/app', 'evil')), undefined);
  });

  test('the CLI: login saves a 0600 profile; push packs a kernel file or sends a layout; delete removes the tag', async () => {
    const profile = join(files, 'cli', 'config.json');
    const env = { UNIHOST_CLIENT_CONFIG: profile };
    const bad = await runCli(['login', '--metro', h.url, '--token', 'bm9ib2R5Om5vdGhpbmc='], env);
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /refused the token/);
    assert.equal(existsSync(profile), false, 'nothing saved for a refused token');
    const login = await runCli(['login', '--metro', h.url, '--token', alice], env);
    assert.equal(login.code, 0, login.stderr);
    assert.match(login.stdout, /as alice/);
    assert.equal(statSync(profile).mode & 0o777, 0o600);
    const kernel = join(files, 'kernel');
    writeFileSync(kernel, multibootKernel('cli pushed'));
    const push = await runCli(['image', 'push', kernel, 'alice/cli:1', '--port', '8080', '--args', 'a b'], env);
    assert.equal(push.code, 0, push.stderr);
    assert.match(push.stderr, /packed .* \(pc\)/);
    assert.match(push.stderr, /pushed/);
    const digest = /digest\s+(sha256:[0-9a-f]{64})/.exec(push.stdout)?.[1];
    assert.equal((await h.daemon.store.read((tx) => tx.images.tag('alice/cli:1')))?.digest, digest);
    // the same kernel again: every blob is already there
    const again = await runCli(['image', 'push', kernel, 'alice/cli:2', '--port', '8080', '--args', 'a b'], env);
    assert.equal(again.code, 0, again.stderr);
    assert.doesNotMatch(again.stderr, / pushed/);
    const list = await runCli(['image', 'list', '--namespace', 'alice'], env);
    assert.match(list.stdout, /alice\/cli:1/);
    const denied = await runCli(['image', 'push', kernel, 'bob/cli:1'], env);
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /DENIED/);
    const del = await runCli(['image', 'delete', 'alice/cli:1'], env);
    assert.equal(del.code, 0, del.stderr);
    assert.equal(await h.daemon.store.read((tx) => tx.images.tag('alice/cli:1')), undefined);
  });

  test('image pull copies from another registry (docker-registry on loopback), with and without auth', async (t) => {
    if (!hasDockerRegistry()) {
      assert.equal(requireAll(), false, 'docker-registry (Debian package docker-registry) is required');
      return t.skip('docker-registry is not installed (Debian package docker-registry)');
    }
    const src = join(files, 'pull-src');
    const { digests } = await kraftkitLayout(src, [
      { os: 'fc', architecture: 'x86_64', kernel: multibootKernel('pulled fc') },
      { os: 'qemu', architecture: 'x86_64', kernel: multibootKernel('pulled qemu') },
    ]);
    // a two-platform index (kraftkit's form) in the source registry
    const index = join(files, 'pull-index');
    cpSync(src, index, { recursive: true });
    const top = Buffer.from(readFileSync(join(src, 'index.json')));
    writeFileSync(join(index, 'blobs', 'sha256', sha(top).slice(7)), top);
    writeFileSync(
      join(index, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        manifests: [{ mediaType: 'application/vnd.oci.image.index.v1+json', digest: sha(top), size: top.length }],
      }),
    );
    const store2 = h.storeUrl ? ['--store', h.storeUrl] : [];
    for (const auth of [undefined, { user: 'puller', password: 'pull-secret' }]) {
      const reg = await startDockerRegistry(auth);
      try {
        const creds = auth ? ['--dest-creds', `${auth.user}:${auth.password}`] : [];
        await skopeo(
          'copy',
          '--all',
          '--preserve-digests',
          '--dest-tls-verify=false',
          ...creds,
          `oci:${index}`,
          `docker://${reg.host}/lib/app:2`,
        );
        const tag = auth ? 'auth' : 'open';
        const base = ['image', '--data-dir', h.dataDir, ...store2, 'pull', '--no-tls-verify'];
        if (auth) {
          const no = await runCli([...base, `${reg.host}/lib/app:2`, '--as', `alice/pulled:${tag}`]);
          assert.notEqual(no.code, 0, 'without credentials the source refuses');
        }
        const r = await runCli([
          ...base,
          ...(auth ? ['--creds', `${auth.user}:${auth.password}`] : []),
          `${reg.host}/lib/app:2`,
          '--as',
          `alice/pulled:${tag}`,
        ]);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, /a platform image/);
        const t = await h.daemon.store.read((tx) => tx.images.tag(`alice/pulled:${tag}`));
        assert.equal(t?.digest, digests[1], 'the qemu manifest of the pulled index');
        const man = await h.daemon.store.read((tx) => tx.registry.tag('alice/pulled', tag));
        assert.equal(man?.digest, sha(top), 'the index keeps its digest');
      } finally {
        await reg.stop();
      }
    }
  });
});
