/**
 * The daemon and reply checks the instances API tests share
 * (instances.test.ts, instances-ops.test.ts): a harness with the simulated
 * machine controller, user alice (`t`) and three images; `useInstancesDaemon`
 * starts it before the file's tests and closes it after.
 */
import { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness, type Reply } from './harness.js';
import { simMachines } from './sim-machines.js';

export let h: Harness;
/** alice's token */
export let t: string;
/** digest of nginx:latest */
export let digest: string;

export function useInstancesDaemon(): void {
  before(async () => {
    h = await startHarness({ maxLogChunk: 16383 }, (s) => [simMachines(s)]);
    t = await h.user('alice');
    digest = await h.image('nginx:latest');
    await h.image('alice/my_app:1.0');
    await h.image('big:latest', { min_memory_mb: 256 });
  });
  after(async () => h.close());
}

export type Any = any; // eslint-disable-line @typescript-eslint/no-explicit-any
export const call = (m: string, p: string, body?: unknown, tok = t) => h.call(m, p, tok, body);
/** The single entry of a one-target answer. */
export const one = (r: Reply): Any => {
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.data.instances.length, 1, r.text);
  return r.body.data.instances[0];
};
export const ok = (r: Reply): Any => {
  const e = one(r);
  assert.equal(e.status, 'success', r.text);
  return e;
};
export const entryError = (r: Reply, code: number, msg?: RegExp): Any => {
  const e = one(r);
  assert.equal(r.body.status, 'error', r.text);
  assert.equal(e.status, 'error');
  assert.equal(e.error, code, r.text);
  if (msg) assert.match(e.message, msg);
  return e;
};
export const bad = (r: Reply, msg: RegExp): void => {
  assert.equal(r.status, 400, r.text);
  assert.equal(r.body.status, 'error');
  assert.match(r.body.message, msg);
};
export const create = async (body: Record<string, unknown>, tok = t) =>
  ok(await call('POST', '/v1/instances', body, tok));
export const get = async (uuid: string, tok = t) => ok(await call('GET', `/v1/instances/${uuid}`, undefined, tok));
export const waitFor = async (uuid: string, state: string, tok = t) =>
  ok(await call('GET', '/v1/instances/wait', { uuid, state, timeout_ms: 5000 }, tok));
