import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { kraftkitLayout, multibootKernel } from '../../src/images/testing/fixtures.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { requirePart } from '../helpers/require.js';
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
});
