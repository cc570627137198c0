// The NetworkDriver contract (src/network/driver.ts), run against both
// implementations: HostNetwork on the real kernel inside a network namespace
// this test creates (and deletes), and MemoryNetwork. The in-memory driver
// that unit tests use must answer as the host one does.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { macFor } from '../../src/network/address.js';
import type { NetworkDriver, TapSpec } from '../../src/network/driver.js';
import { HostNetwork, tapName } from '../../src/network/host.js';
import { MemoryNetwork } from '../../src/network/memory.js';
import { canRunNetns } from '../helpers/netns.js';
import { requirePart } from '../helpers/require.js';

const SUBNET = '10.76.0.0/16';
const spec = (userId: string, ip: string): TapSpec => {
  const id = randomUUID();
  return { tap: tapName(id), userId, ip, mac: macFor(`${id}:nic0`) };
};

function contract(name: string, make: () => NetworkDriver, o: { skip?: string | false; ns?: string } = {}): void {
  describe(`NetworkDriver contract: ${name}`, { skip: requirePart(o.skip) }, () => {
    if (o.ns) {
      before(() => execFileSync('ip', ['netns', 'add', o.ns!]));
      after(() => execFileSync('ip', ['netns', 'del', o.ns!]));
    }

    test('the gateway is the first address; netdev.ip names address/prefix, gateway and DNS', async () => {
      const n = make();
      await n.setup();
      await n.setup(); // idempotent
      assert.equal(n.gateway, '10.76.0.1');
      assert.equal(n.netdevIp('10.76.0.9'), '10.76.0.9/16:10.76.0.1:10.76.0.1');
    });

    test('sync makes the set of taps exactly the expected one; ensureTap and removeTap are idempotent', async () => {
      const n = make();
      await n.setup();
      const a = spec('alice', '10.76.0.2');
      const b = spec('bob', '10.76.0.3');
      const first = await n.sync([a, b]);
      assert.deepEqual(first.created.sort(), [a.tap, b.tap].sort());
      assert.deepEqual(first.removed, []);
      await n.ensureTap(a);
      await n.ensureTap(a);
      const second = await n.sync([a]);
      assert.deepEqual(second, { created: [], removed: [b.tap] });
      await n.removeTap(b.tap); // already gone
      await n.removeTap(a.tap);
      assert.deepEqual(await n.sync([]), { created: [], removed: [] });
    });

    test('a tap spec with a bad MAC is refused, naming it', async () => {
      const n = make();
      await n.setup();
      await assert.rejects(n.ensureTap({ ...spec('alice', '10.76.0.4'), mac: 'zz:00' }), /bad MAC 'zz:00'/);
    });

    test('a tap name without the unihost prefix is refused', async () => {
      const n = make();
      await n.setup();
      await assert.rejects(
        n.ensureTap({ ...spec('alice', '10.76.0.6'), tap: 'eth9' }),
        /tap 'eth9' does not start with 'uh'/,
      );
      await assert.rejects(n.removeTap('eth9'), /does not start with 'uh'/);
    });

    test('a readiness probe ends when its signal aborts', async () => {
      const n = make();
      await n.setup();
      const a = spec('alice', '10.76.0.5');
      await n.ensureTap(a);
      const ac = new AbortController();
      ac.abort(new Error('boot timed out'));
      await assert.rejects(n.waitForPort(a.ip, 8080, ac.signal), /boot timed out/);
      await n.removeTap(a.tap);
    });
  });
}

const ns = `uhcontract-${randomBytes(4).toString('hex')}`;
contract('HostNetwork (in a test-made namespace)', () => new HostNetwork({ subnet: SUBNET, netns: ns }), {
  ns,
  skip: !canRunNetns() && 'needs root, ip, nft, QEMU and mkfs.ext4',
});
contract('MemoryNetwork', () => new MemoryNetwork(SUBNET));

// HostNetwork's probe is waitForPort (src/network/probe.ts): it retries until something accepts or
// its signal aborts, tested on loopback in src/network/probe.test.ts. It is not run here against a
// guest address: from the host namespace that would send traffic outside the test's namespace.
test('MemoryNetwork: a probe of an address no tap has waits, like the real one, until its signal aborts', async () => {
  const n = new MemoryNetwork(SUBNET);
  const a = spec('alice', '10.76.0.7');
  await n.ensureTap(a);
  await n.waitForPort(a.ip, 8080, new AbortController().signal); // the tap's guest answers at once
  const ac = new AbortController();
  let settled = false;
  const p = n.waitForPort('10.76.0.99', 8080, ac.signal).finally(() => (settled = true));
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(settled, false, 'still waiting: nothing answers there');
  ac.abort(new Error('boot timed out'));
  await assert.rejects(p, /boot timed out/);
});
