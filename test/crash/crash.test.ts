/**
 * The short form of the crash-consistency harness (test/crash/run.ts) that
 * the test command runs: a fixed seed, a few hundred mixed operations from
 * concurrent clients (suspends, with their memory snapshots, among them)
 * and a few SIGKILLs of the daemon (and of QEMUs and HAProxy), with the
 * gateway, the .internal DNS and ACME (pebble; custom domains of groups)
 * on, then
 * the checker: nothing acknowledged lost, nothing left on the host that the
 * store does not know, every instance converged. The long form (1,000+
 * operations, 30 kills) is `npx tsx test/crash/run.ts`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { canRunNetns, insideTestNetns, runInTestNetns } from '../helpers/netns.js';
import { hasPebble } from '../helpers/pebble.js';
import { postgresMissing, testPostgres } from '../helpers/postgres.js';
import { requirePart } from '../helpers/require.js';
import { describeReport, runCrash } from './run.js';

const ACME = hasPebble();

if (!insideTestNetns()) {
  runInTestNetns(
    import.meta.url,
    'crash consistency: SIGKILLs of the daemon during mixed operations lose nothing (short form)',
    !canRunNetns() && 'needs root, ip, nft, QEMU and mkfs.ext4',
  );
} else {
  test('SIGKILLs of the daemon and of QEMUs during mixed operations: nothing lost, nothing left, all converged', async () => {
    const seed = Number(process.env.UNIHOST_CRASH_SEED ?? 20261123);
    // HAProxy masters are killed too: a daemon killed between spawning a master and HAProxy writing its
    // pid file once left two masters (CI, seed 20261123); the next daemon now ends every stray one
    const r = await runCrash({
      ops: 200,
      kills: 5,
      clients: 4,
      seed,
      maxInstances: 1,
      killHaproxy: true,
      // custom domains' certificates from pebble, ordered while the daemon is killed (where pebble is installed)
      acme: ACME,
      say: () => undefined,
    });
    const text = describeReport(r);
    process.stderr.write(`${text}\n`);
    assert.ok(r.acknowledged > 50, `enough acknowledged writes to mean something:\n${text}`);
    // the kills must land in the middle of work, not after it: requests in flight, some cut unanswered
    assert.ok(r.killsInFlight >= 3, `at least 3 of the 5 kills interrupted requests in flight:\n${text}`);
    assert.ok(r.unanswered > 0, `a kill cut at least one request before its answer:\n${text}`);
    assert.ok(r.groups >= 1, `groups were published through the gateway:\n${text}`);
    if (ACME) assert.ok(r.customDomains >= 1, `a group had a custom domain (an ACME order):\n${text}`);
    else process.stderr.write('ACME part skipped: no pebble (apt-get install pebble)\n');
    // suspends (memory snapshots under kills) are part of the mix; how many land depends on timing
    // (a suspend needs a running instance), so the count is reported, not required
    assert.deepEqual(r.lost, [], text);
    assert.deepEqual(r.leftovers, [], text);
    assert.deepEqual(r.notConverged, [], text);
  });
  // the many-hosts store (docs/hosts.md): the same daemon on PostgreSQL, with its host lease and the
  // watchdog that ends its VMs when the lease runs out; an API server killed mid-request loses nothing
  test(
    'on PostgreSQL: SIGKILLs of the daemon during mixed operations lose nothing acknowledged',
    { skip: requirePart(postgresMissing()) },
    async () => {
      const url = await testPostgres().createDb();
      const r = await runCrash({
        ops: 120,
        kills: 3,
        clients: 4,
        seed: Number(process.env.UNIHOST_CRASH_SEED ?? 20261128),
        maxInstances: 1,
        // HAProxy kills are the SQLite run's: here, once in CI, one left a second master of the data dir
        // (a race of HAProxy's restart, issue 26, not of the store); this run is about the store
        killHaproxy: false,
        storeUrl: url,
        say: () => undefined,
      });
      const text = describeReport(r);
      process.stderr.write(`PostgreSQL:\n${text}\n`);
      assert.ok(r.acknowledged > 30, `enough acknowledged writes to mean something:\n${text}`);
      assert.ok(r.killsInFlight >= 2, `at least 2 of the 3 kills interrupted requests in flight:\n${text}`);
      assert.deepEqual(r.lost, [], text);
      assert.deepEqual(r.leftovers, [], text);
      assert.deepEqual(r.notConverged, [], text);
    },
  );
}
