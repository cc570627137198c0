/* eslint-disable @typescript-eslint/no-explicit-any -- API replies are JSON; the assertions check their shape. */
/**
 * The daemon and helpers the autoscale API tests share (autoscale.test.ts,
 * autoscale-policies.test.ts): a harness with the simulated machine
 * controller, user alice and the image app:latest; `useAutoscaleDaemon`
 * starts it before the file's tests and closes it after.
 */
import { after, before } from 'node:test';
import { startHarness, type Harness } from './harness.js';
import { simMachines } from './sim-machines.js';
import { replyAsserts } from './replies.js';

export let h: Harness;
/** alice's token */
export let alice: string;

export function useAutoscaleDaemon(): void {
  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    alice = await h.user('alice');
    await h.image('app:latest');
  });
  after(async () => h.close());
}

export const { ok, entryError, bad } = replyAsserts('service_groups');

export const SVC = [{ port: 443, handlers: ['http', 'tls'] }];
let seq = 0;

/** A persistent group with one (stopped) instance in it. */
export async function groupWithMaster(hh: Harness, token: string): Promise<{ group: any; master: any }> {
  const name = `as-${++seq}`;
  const [group] = ok(await hh.call('POST', '/v1/services', token, { name, services: SVC }));
  const [master] = ok(
    await hh.call('POST', '/v1/instances', token, { name: `${name}-m`, image: 'app:latest', service_group: { name } }),
    'instances',
  );
  return { group, master };
}

export const instanceState = async (hh: Harness, token: string, uuid: string) =>
  ok(await hh.call('GET', '/v1/instances', token, { uuid }), 'instances')[0].state;
