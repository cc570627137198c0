// The order HostNetwork runs its commands in, with a scripted command runner
// (no kernel: the commands themselves are tested in test/vm/network.test.ts):
// taps are made beside other taps' changes, `nft` runs never overlap and
// merge when they queue up, and whole-set changes run alone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HostNetwork, tapName, type TapSpec } from './host.js';
import type { Runner } from './cmd.js';

const spec = (n: number): TapSpec => ({
  tap: tapName(`${n}0000000-0000-4000-8000-000000000000`),
  userId: 'alice',
  ip: `10.90.0.${n + 1}`,
  mac: `02:00:00:00:00:0${n}`,
});

/** A runner that logs each command and holds the ones matching a held pattern until released. */
class Script {
  readonly log: string[] = [];
  private readonly held: { re: RegExp; wait: Promise<void>; release: () => void }[] = [];
  nftActive = 0;
  nftMaxActive = 0;
  nftRuns = 0;
  /** the input of the last `nft` run that succeeded */
  rules = '';
  /** how many `nft` runs fail next */
  nftFailures = 0;

  hold(re: RegExp): () => void {
    let release!: () => void;
    const wait = new Promise<void>((r) => (release = r));
    this.held.push({ re, wait, release });
    return release;
  }

  readonly run: Runner = async (argv, input) => {
    const line = `${argv.join(' ')}${input ? ` <${input.trim().split('\n')[0]}` : ''}`;
    const nft = argv[0] === 'nft';
    if (nft) {
      this.nftRuns++;
      this.nftMaxActive = Math.max(this.nftMaxActive, ++this.nftActive);
    }
    this.log.push(`start ${line}`);
    try {
      const h = this.held.find((x) => x.re.test(line));
      if (h) await h.wait;
      await new Promise((r) => setImmediate(r));
      if (nft && this.nftFailures > 0) {
        this.nftFailures--;
        throw new Error('nft: Could not process rule: Device or resource busy');
      }
      if (nft) this.rules = input ?? '';
      if (argv.includes('-j')) return '[]';
      return '';
    } finally {
      if (nft) this.nftActive--;
      this.log.push(`end ${line}`);
    }
  };
}

const settled = (p: Promise<unknown>): (() => boolean) => {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  return () => done;
};

test("a new tap is made while another tap's removal is still under way", async () => {
  const s = new Script();
  const net = new HostNetwork({ subnet: '10.90.0.0/24', run: s.run });
  const [a, b] = [spec(1), spec(2)];
  await (
    await net.attachTap(a)
  ).admitted;
  const release = s.hold(new RegExp(`link del dev ${a.tap}`));
  const removed = settled(net.removeTap(a.tap));
  const { admitted } = await net.attachTap(b);
  await admitted;
  assert.equal(removed(), false, 'b was made and admitted while a was still being removed');
  assert.ok(s.log.includes(`end ip -batch - <tuntap add dev ${b.tap} mode tap`));
  release();
  await net.removeTap(a.tap);
});

test('nft runs one at a time, and the updates that queue behind a run are applied by one more', async () => {
  const s = new Script();
  const net = new HostNetwork({ subnet: '10.90.0.0/24', run: s.run });
  const release = s.hold(/^nft/);
  const first = net.attachTap(spec(1));
  await first;
  // three more taps while the first run is held: their rules wait behind it
  const more = await Promise.all([2, 3, 4].map((n) => net.attachTap(spec(n))));
  release();
  await (
    await first
  ).admitted;
  await Promise.all(more.map((m) => m.admitted));
  assert.equal(s.nftMaxActive, 1, 'never two nft at once');
  assert.equal(s.nftRuns, 2, `the held run and one for the three others (runs: ${s.nftRuns})`);
});

test('sync waits for the tap changes under way, and a tap change asked for during it waits for it', async () => {
  const s = new Script();
  const net = new HostNetwork({ subnet: '10.90.0.0/24', run: s.run });
  const a = spec(1);
  const release = s.hold(new RegExp(`tuntap add dev ${a.tap}`));
  const attaching = net.attachTap(a);
  await new Promise((r) => setImmediate(r));
  const syncing = net.sync([a]);
  const b = net.attachTap(spec(2));
  await new Promise((r) => setTimeout(r, 20));
  assert.ok(!s.log.some((l) => l.startsWith('start ip -d -j link show')), 'sync did not start during the tap change');
  release();
  await attaching;
  await syncing;
  await b;
  const syncStart = s.log.findIndex((l) => l.startsWith('start ip -d -j link show'));
  const syncEnd = s.log.length - 1 - [...s.log].reverse().findIndex((l) => l.startsWith('end ip -d -j link show'));
  const aEnd = s.log.findIndex((l) => l.startsWith(`end ip -batch - <tuntap add dev ${a.tap}`));
  const bStart = s.log.findIndex((l) => l.startsWith(`start ip -batch - <tuntap add dev ${spec(2).tap}`));
  assert.ok(aEnd < syncStart, 'sync began after the tap change under way');
  assert.ok(bStart > syncEnd, 'the tap change asked for during sync ran after it');
});

test('a failed nft run that a later one covers admits the tap; failing again, the tap leaves the rules', async () => {
  const s = new Script();
  const net = new HostNetwork({ subnet: '10.90.0.0/24', run: s.run });
  const [a, b, c] = [spec(1), spec(2), spec(3)];
  // a's run fails while b's update waits behind it; b's run has a in it too: a is admitted after all
  const release = s.hold(/^nft/);
  const first = await net.attachTap(a);
  const second = await net.attachTap(b);
  s.nftFailures = 1;
  release();
  await Promise.all([first.admitted, second.admitted]);
  for (const t of [a, b]) assert.ok(s.rules.includes(t.tap), `${t.tap} is in the rules applied`);
  // every run fails for c (its elements, then the whole ruleset, then the retry's whole ruleset): its
  // boot is refused, and once nft works again the rules no longer name it
  s.nftFailures = 3;
  const third = await net.attachTap(c);
  await assert.rejects(third.admitted, /Device or resource busy/);
  await new Promise((r) => setTimeout(r, 20));
  assert.ok(!s.rules.includes(c.tap), 'c is not in the rules');
  for (const t of [a, b]) assert.ok(s.rules.includes(t.tap), `${t.tap} is still in the rules`);
});
