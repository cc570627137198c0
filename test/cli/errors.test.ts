import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { runCli, type CliResult } from '../helpers/cli.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { simMachines } from '../helpers/sim-machines.js';

/** One clear `unihost: ...` line on stderr, never a stack trace, nothing on stdout. */
function oneLine(r: CliResult, code: number, re: RegExp): void {
  assert.equal(r.code, code, `exit code; stderr: ${r.stderr}`);
  assert.doesNotMatch(r.stderr, /\n\s+at |Error:/, r.stderr);
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /^unihost: /);
  assert.match(r.stderr, re);
  assert.equal(r.stdout, '');
}

/** A loopback port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

describe('unihost CLI errors and exit codes', () => {
  let h: Harness;
  let env: Record<string, string>;
  const cli = (...args: string[]) => runCli(args, env);

  before(async () => {
    h = await startHarness({}, (s) => [simMachines(s)]);
    await h.image('echo:latest');
    env = { UKC_METRO: h.url, UKC_TOKEN: await h.user('alice') };
  });
  after(async () => h?.close());

  test('unknown instance: exit 3 with the API message', async () => {
    oneLine(await cli('instance', 'get', 'nope'), 3, /No instance with name 'nope'/);
    oneLine(await cli('instance', 'logs', 'nope'), 3, /No instance with name 'nope'/);
    oneLine(
      await cli('instance', 'delete', '00000000-0000-4000-8000-000000000000'),
      3,
      /No instance with UUID '00000000-0000-4000-8000-000000000000'/,
    );
  });

  test('a batch with one unknown target prints what worked, then the failure', async () => {
    assert.equal((await cli('instance', 'create', '-n', 'real', 'echo:latest')).code, 0);
    const r = await cli('instance', 'delete', 'real', 'ghost');
    assert.equal(r.code, 3, r.stderr);
    assert.match(r.stdout, /^real +stopped +deleted$/m);
    assert.equal(r.stderr, "unihost: No instance with name 'ghost'\n");
  });

  test('a refused create: exit 1 with the reason (3 for an unknown image)', async () => {
    oneLine(await cli('instance', 'create', '-m', '100000', 'echo:latest'), 1, /memory/);
    oneLine(await cli('instance', 'create', 'nosuch:image'), 3, /nosuch/);
  });

  test('wrong or missing token: exit 4', async () => {
    oneLine(
      await runCli(['instance', 'list'], { ...env, UKC_TOKEN: 'bm9ib2R5OnNlY3JldA==' }),
      4,
      /token was refused \(HTTP 401/,
    );
    oneLine(await runCli(['instance', 'list', '--token', 'wrong'], env), 4, /token was refused/);
    oneLine(await runCli(['instance', 'list'], { UKC_METRO: h.url }), 4, /no token: pass --token, set UKC_TOKEN/);
    // the aliases official clients read work too
    const alias = await runCli(['instance', 'list'], { UKC_METRO: h.url, KRAFTCLOUD_TOKEN: env.UKC_TOKEN! });
    assert.equal(alias.code, 0, alias.stderr);
  });

  test('unreachable metro: exit 5 naming the address', async () => {
    const port = await closedPort();
    oneLine(
      await cli('instance', 'list', '--metro', `http://127.0.0.1:${port}`),
      5,
      new RegExp(`cannot reach http://127\\.0\\.0\\.1:${port}: ECONNREFUSED`),
    );
    oneLine(await cli('instance', 'list', '--metro', 'ftp://x'), 2, /only http:\/\/ and https:\/\//);
  });

  test('usage errors: exit 2', async () => {
    const unknown = await cli('instance', 'list', '--bogus');
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown option '--bogus'/);
    const missing = await cli('instance', 'get');
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /missing required argument 'instance'/);
    oneLine(await cli('instance', 'list', '-o', 'xml'), 2, /-o must be one of table, json, yaml, not 'xml'/);
    oneLine(await cli('instance', 'wait', 'x', '-t', 'soon'), 2, /--timeout must be a duration/);
    oneLine(await cli('instance', 'create', '-p', '443:x', 'echo:latest'), 2, /--port '443:x' is not PORT/);
  });

  test('--help shows examples and exits 0', async () => {
    const r = await cli('instance', 'create', '--help');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Usage: unihost instance create \[options\] \[image\] \[args\.\.\.\]/);
    assert.match(r.stdout, /Examples:\n {2}\$ unihost instance create echo:latest -- hello world/);
    assert.match(r.stdout, /Global Options:[\s\S]*--metro <url>/);
  });
});
