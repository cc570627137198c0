// The long-lived `nft` (nft-batch.ts) against the real `nft` in check mode (`nft -c -i`: every script is
// parsed and checked by the kernel, none is committed, so the host's ruleset is never touched): a script
// is one transaction, its failure is told to it alone with nft's message and where, a dead or silent
// process fails what it had and is started again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { NftBatch } from './nft-batch.js';
import { CommandError } from './cmd.js';
import { hasCommand, requirePart } from '../../test/helpers/require.js';

const skip = requirePart((process.getuid?.() !== 0 || !hasCommand('nft')) && 'needs root and nft');

const table = `table inet uhbatchtest {
  chain c {
    type filter hook input priority 0; policy accept;
    tcp dport 22 accept
  }
}`;

test('scripts of several lines run one after the other; each failure is its own script', { skip }, async () => {
  const b = new NftBatch(['nft', '-c'], 5000);
  try {
    const [good, bad, also] = await Promise.allSettled([
      b.run(table),
      b.run(`${table}\nadd rule inet uhbatchtest nosuch tcp dport 23 accept`),
      b.run(table),
    ]);
    assert.deepEqual([good.status, bad.status, also.status], ['fulfilled', 'rejected', 'fulfilled']);
    const e = (bad as PromiseRejectedResult).reason as CommandError;
    assert.ok(e instanceof CommandError);
    assert.match(e.stderr, /^Error: Could not process rule: No such file or directory$/m);
    assert.match(e.stderr, /^at: .*add rule inet uhbatchtest nosuch/m);
    for (let i = 0; i < 30; i++) await b.run(table);
    // no history of the scripts (nft -i keeps one in $HOME otherwise)
    assert.equal(readFileSync(`/proc/${b.pid!}/environ`, 'utf8').split('\0').includes('HOME=/dev/null'), true);
    await b.run('');
    await assert.rejects(b.run('add rule inet'), /Error: syntax error/);
  } finally {
    b.close();
  }
});

test('a script with a comment is refused before it is sent (it would end the line)', async () => {
  const b = new NftBatch(['nft', '-c'], 5000);
  assert.equal(NftBatch.fits('table inet x {}\n# a comment'), false);
  await assert.rejects(b.run('table inet x {} # a comment'), /a script with comments/);
  b.close();
});

test('a process that dies fails the scripts it had, and the next script starts another', { skip }, async () => {
  const b = new NftBatch(['nft', '-c'], 5000);
  try {
    await b.run(table);
    const pending = b.run(table);
    b.close(); // as if it died with the script under way
    await assert.rejects(pending, (e: CommandError) => e instanceof CommandError && /closed/.test(e.stderr));
    await b.run(table);
  } finally {
    b.close();
  }
});

test('a process that does not answer is killed at the deadline; the script fails naming it', async () => {
  // `sh -c 'exec sleep 30'` reads nothing and answers nothing (the arguments meant for nft are its $0...)
  const b = new NftBatch(['sh', '-c', 'exec sleep 30'], 200);
  const t0 = Date.now();
  await assert.rejects(b.run(table), (e: CommandError) => e.timeoutMs === 200 && /no answer in 200 ms/.test(e.stderr));
  assert.ok(Date.now() - t0 < 5000);
  b.close();
});
