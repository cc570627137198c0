/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * A stop acknowledged while a stop that ends in standby is under way (a
 * suspend, a scale-to-zero sleep) ends the instance `stopped`, not in
 * standby: standby would keep its memory and wake it on the next request,
 * against the user's stop. Found by the crash harness on PostgreSQL (seed
 * 20261128: "last acknowledged stop, now standby"). No controller runs
 * here: the test moves the instance itself, so the order of the two
 * requests and of the VM's end is exact.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fire } from '../../src/domain/instance-states.js';
import { recordExitInTx } from '../../src/reconcile/machine-exit.js';
import { startHarness, type Harness } from '../helpers/harness.js';

let h: Harness;
let token: string;
before(async () => {
  h = await startHarness({ machines: { driver: 'memory' } as any, network: { enabled: false } as any });
  token = await h.user('alice');
  const kernel = join(h.dataDir, 'kernel');
  writeFileSync(kernel, 'a kernel nothing boots');
  await h.daemon.services.images.importKernel('app:latest', { kernel, machine: 'microvm' });
});
after(() => h?.close());

const get = (id: string) => h.daemon.store.read((tx) => tx.instances.getAny(id));

/** An instance its (absent) machine controller would have booted: running. */
async function running(name: string): Promise<string> {
  const r = await h.call('POST', '/v1/instances', token, { name, image: 'app:latest', autostart: true });
  const id: string = r.body.data.instances[0].uuid;
  await h.daemon.store.tx(async (tx) => {
    const i = (await tx.instances.getAny(id))!;
    await fire(tx, i, 'booted', { started_at: new Date().toISOString() });
  });
  assert.equal((await get(id))!.state, 'running');
  return id;
}

/** The VM ends (cleanly), as the machine controller records it. */
async function vmEnds(id: string): Promise<void> {
  const at = Date.now();
  await h.daemon.store.tx((tx) =>
    recordExitInTx(
      tx,
      h.daemon.services as any,
      id,
      {},
      { type: 'exit', at, status: 0, panicked: false, control: {} as any, stderr: '', console: '' },
      at,
    ),
  );
}

for (const how of ['suspend', 'suspend with a drain'] as const) {
  test(`a stop during a ${how} ends stopped, not standby`, async () => {
    const id = await running(how.replaceAll(' ', '-'));
    const body = how === 'suspend' ? { uuid: id } : { uuid: id, drain_timeout_ms: 60_000 };
    const s = await h.call('PUT', '/v1/instances/suspend', token, body);
    assert.equal(s.body.status, 'success', s.text);
    const during = (await get(id))!;
    assert.equal(during.stop_request?.standby, true);
    const st = await h.call('PUT', '/v1/instances/stop', token, { uuid: id });
    assert.equal(st.body.status, 'success', st.text);
    assert.equal(st.body.data.instances[0].state, during.state, 'the stop under way goes on');
    const req = (await get(id))!.stop_request!;
    assert.equal(req.standby, undefined, 'no longer a stop into standby');
    assert.equal(req.snapshot, undefined, 'no memory kept');
    assert.equal(req.by, 'user');
    if (during.state === 'draining') {
      await h.daemon.store.tx(async (tx) => void (await fire(tx, (await tx.instances.getAny(id))!, 'drained')));
    }
    await vmEnds(id);
    const end = (await get(id))!;
    assert.equal(end.state, 'stopped');
    assert.equal(end.desired, 'stopped');
  });
}

test('a stop of a running instance, and one during a plain stop, are as before', async () => {
  const id = await running('plain');
  const st = await h.call('PUT', '/v1/instances/stop', token, { uuid: id });
  assert.equal(st.body.data.instances[0].state, 'stopping');
  const again = await h.call('PUT', '/v1/instances/stop', token, { uuid: id });
  assert.equal(again.body.data.instances[0].state, 'stopping');
  await vmEnds(id);
  assert.equal((await get(id))!.state, 'stopped');
});
