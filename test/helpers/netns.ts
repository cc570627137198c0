/**
 * Runs a VM test file inside a network namespace it creates and deletes: the
 * outer run adds the namespace and re-runs the same file in it (`ip netns
 * exec`), so the daemon, its bridge, its VMs and every client live there and
 * no traffic leaves it. Inside, `UH_TEST_NETNS` names the namespace.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { requirePart } from './require.js';

const has = (cmd: string): boolean => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;

/** Root with the host tools the daemon's network needs. */
export const canRunNetns = (): boolean =>
  process.getuid?.() === 0 && ['ip', 'nft', 'qemu-system-x86_64', 'mkfs.ext4'].every(has);

/** Whether this process is the inner run. */
export const insideTestNetns = (): boolean => process.env.UH_TEST_NETNS !== undefined;

/**
 * Runs `fileUrl` (a TypeScript file) with `args` inside a fresh namespace
 * `<prefix>-<random>`, with `env` added and `UH_TEST_NETNS` naming it, and
 * deletes the namespace (and whatever still runs in it) afterwards.
 */
export function runFileInNewNetns(
  fileUrl: string,
  o: {
    prefix: string;
    args?: string[];
    env?: NodeJS.ProcessEnv;
    stdio?: 'inherit' | 'pipe';
    node?: string[];
    /** the inner run is killed after this long (default 10 minutes: a test file) */
    timeoutMs?: number;
  },
): SpawnSyncReturns<string> {
  const ns = `${o.prefix}-${randomBytes(4).toString('hex')}`;
  execFileSync('ip', ['netns', 'add', ns]);
  try {
    execFileSync('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
    return spawnSync(
      'ip',
      [
        'netns',
        'exec',
        ns,
        process.execPath,
        '--import',
        'tsx',
        ...(o.node ?? []),
        fileURLToPath(fileUrl),
        ...(o.args ?? []),
      ],
      {
        env: { ...process.env, ...o.env, UH_TEST_NETNS: ns },
        encoding: 'utf8',
        stdio: o.stdio ?? 'pipe',
        timeout: o.timeoutMs ?? 600_000,
      },
    );
  } finally {
    // Whatever the inner run left in the namespace goes with it.
    const pids = spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
    for (const p of pids) spawnSync('kill', ['-9', p]);
    execFileSync('ip', ['netns', 'del', ns]);
  }
}

/**
 * The outer run: one test that runs `fileUrl` inside a fresh namespace and
 * fails with its output. `missing` names a part the file needs that this
 * machine lacks (test/helpers/require.ts: a skip, or under
 * UNIHOST_REQUIRE_ALL=1 a failure). The inner run's skips, with their
 * reasons, and its counts are passed through as diagnostics, and an inner
 * run that ran no test at all fails.
 */
export function runInTestNetns(fileUrl: string, title: string, missing: string | false = false): void {
  test(title, { skip: requirePart(missing) }, (t) => {
    const r = runFileInNewNetns(fileUrl, {
      prefix: 'uhtest',
      node: ['--test', '--test-reporter=spec'],
      // NODE_TEST_CONTEXT would make the inner runner talk the parent runner's protocol instead of printing.
      env: { NODE_TEST_CONTEXT: undefined },
    });
    const out = `${r.stdout}\n${r.stderr}`;
    for (const line of innerReport(r.stdout)) t.diagnostic(line);
    assert.equal(r.status, 0, `inner run failed:\n${out.slice(-6000)}`);
    assert.match(r.stdout, /ℹ fail 0/, out.slice(-6000));
    assert.doesNotMatch(r.stdout, /ℹ pass 0\n/, `the inner run passed no test:\n${out.slice(-6000)}`);
  });
}

/** What the outer report shows of an inner run: every skipped test with its reason, and the counts. */
export function innerReport(stdout: string): string[] {
  const lines = stdout.split('\n');
  const skips = lines.filter((l) => /^\s*﹣ /.test(l)).map((l) => `inner skip: ${l.trim().replace(/^﹣ /, '')}`);
  const counts = lines
    .filter((l) => /^ℹ (tests|pass|fail|skipped|todo) \d+/.test(l))
    .map((l) => l.slice(2))
    .join(', ');
  return [...skips, `inner run: ${counts}`];
}
