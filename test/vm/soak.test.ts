/**
 * The soak's short form (issue 26): bench/soak.ts for one minute with
 * `--check`: the real daemon under API traffic, boots, wakes and gateway
 * load, in its own network namespace; once the load ends and what it made
 * is deleted, the daemon's descriptors and sockets, HAProxy's processes,
 * the QEMUs and the data dir's disk use are back where they were, and no
 * operation failed. The hour-long run and its figures: docs/operations.md,
 * "Soak".
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { canRunNetns } from '../helpers/netns.js';
import { requirePart } from '../helpers/require.js';
import { ROOT, unikraftDir } from '../helpers/vm.js';

const UK = unikraftDir();

test(
  'one minute of mixed load: descriptors, sockets, HAProxy processes, QEMUs and disk come back; nothing fails',
  {
    skip: requirePart(
      (!canRunNetns() && 'needs root, ip, nft, QEMU and mkfs.ext4') ||
        (!UK && 'no Unikraft kernels (set UNIHOST_UNIKRAFT_DIR; default ../shared/unikraft)'),
    ),
  },
  (t) => {
    const r = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        join(ROOT, 'bench', 'soak.ts'),
        ...['--minutes', '1', '--sample-s', '15', '--check'],
        // HAProxy's line for every abnormal request (with its termination state) lands in the daemon's
        // log: a failure's window shows how the gateway ended it
        ...['--daemon-env', 'UNIHOST_GATEWAY_LOG_ERRORS=1'],
      ],
      { cwd: ROOT, encoding: 'utf8', env: { ...process.env, UNIHOST_UNIKRAFT_DIR: UK }, timeout: 600_000 },
    );
    const out = `${r.stdout}\n${r.stderr}`;
    for (const line of r.stdout.split('\n').filter((l) => /^(#|baseline|settled|\s+\d+ s)/.test(l))) t.diagnostic(line);
    assert.equal(r.status, 0, out.slice(-16000));
    assert.match(r.stdout, /^settled /m, out.slice(-3000));
    assert.doesNotMatch(r.stdout, /NOT FLAT/);
    assert.match(r.stdout, /# \d+ API calls, [1-9]\d* boots, [1-9]\d* wakes, [1-9]\d* gateway requests .*; 0 failures/);
  },
);
