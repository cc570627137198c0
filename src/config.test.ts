import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { ConfigFileSchema } from './config-schema.js';
import { DEFAULTS, gatewayThreads, loadConfig } from './config.js';

/** Writes `content` as a config file and loads it. */
function load(content: unknown, env: NodeJS.ProcessEnv = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'uh-config-'));
  try {
    const file = join(dir, 'config.json');
    writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
    return loadConfig({ config: file }, env);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('the schema knows every key of the embedded defaults, with their types', () => {
  assert.deepEqual([...Value.Errors(ConfigFileSchema, DEFAULTS)], []);
});

test('a file sets what it names; the rest keeps the defaults; store.url and roles are read', () => {
  const c = load({
    machines: { accel: 'tcg' },
    store: { url: 'postgresql://u@/db?host=/run/postgresql' },
    roles: ['api'],
  });
  assert.equal(c.machines.accel, 'tcg');
  assert.equal(c.machines.qemu, DEFAULTS.machines.qemu);
  assert.equal(c.store.url, 'postgresql://u@/db?host=/run/postgresql');
  assert.deepEqual(c.roles, ['api']);
  assert.equal(load({}, { UNIHOST_STORE: 'postgres://x@h/d' }).store.url, 'postgres://x@h/d', 'the environment wins');
});

test('unknown keys and wrong types are refused at start, with the path named', () => {
  const cases: [unknown, RegExp][] = [
    [{ machines: { acel: 'tcg' } }, /machines\.acel: unknown key \(known: driver, accel/],
    [{ bogus: true }, /bogus: unknown key/],
    [{ machines: { accel: 'fast' } }, /machines\.accel: "fast" is not one of auto, kvm, tcg/],
    [{ network: { dnsPort: '53' } }, /network\.dnsPort: expected integer \(got "53"\)/],
    [{ store: { url: 5 } }, /store\.url: expected string/],
    [{ roles: ['api', 'db'] }, /roles\.1: "db" is not one of api, agent, gateway/],
    [{ capacity: { memoryFraction: 2 } }, /capacity\.memoryFraction: /],
    ['[1, 2]', /\(top\)/],
    ['{ "a": ', /is not valid JSON/],
  ];
  for (const [content, re] of cases) assert.throws(() => load(content), re, JSON.stringify(content));
});

test('UNIHOST_ROLE is checked like --role', () => {
  assert.deepEqual(loadConfig({}, { UNIHOST_ROLE: 'api, gateway' }).roles, ['api', 'gateway']);
  assert.throws(
    () => loadConfig({}, { UNIHOST_ROLE: 'api,db' }),
    /UNIHOST_ROLE: unknown role 'db' \(known: api, agent, gateway\)/,
  );
});

test('HAProxy threads: as configured, else 1 on up to 2 CPUs and a quarter of the CPUs above (1..16)', () => {
  assert.equal(gatewayThreads(3, 2), 3);
  assert.deepEqual(
    [1, 2, 4, 8, 16, 64, 128].map((cpus) => gatewayThreads(0, cpus)),
    [1, 1, 1, 2, 4, 16, 16],
  );
  assert.throws(() => load({ gateway: { threads: -1 } }), /gateway\.threads/);
  assert.equal(load({ gateway: { threads: 2 } }).gateway.threads, 2);
});
