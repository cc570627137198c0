import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { JsonLineParser, LineTooLong, QmpClient, QmpError } from './qmp.js';

const dir = mkdtempSync(join(tmpdir(), 'unihost-qmp-test-'));
const children: ChildProcess[] = [];
const clients: QmpClient[] = [];
const servers: { server: Server; conns: Set<Socket> }[] = [];

after(() => {
  for (const c of clients) c.close();
  for (const { server, conns } of servers) {
    for (const s of conns) s.destroy();
    server.close();
  }
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function startQemu(name: string): { child: ChildProcess; sock: string } {
  const sock = join(dir, `${name}.sock`);
  const child = spawn(
    'qemu-system-x86_64',
    ['-M', 'none', '-nodefaults', '-nographic', '-qmp', `unix:${sock},server=on,wait=off`],
    { stdio: 'ignore' },
  );
  children.push(child);
  return { child, sock };
}

async function connect(sock: string, timeoutMs?: number): Promise<QmpClient> {
  const c = await QmpClient.connect(sock, timeoutMs);
  clients.push(c);
  return c;
}

describe('QMP against a real QEMU', () => {
  let qemu: { child: ChildProcess; sock: string };
  let qmp: QmpClient;

  before(async () => {
    qemu = startQemu('real');
    // Connect immediately: the socket does not exist yet, connect() must retry.
    qmp = await connect(qemu.sock, 10_000);
  });

  test('query-status and query-version', async () => {
    const status = await qmp.execute<{ status: string; running: boolean }>('query-status');
    assert.equal(typeof status.status, 'string');
    assert.equal(typeof status.running, 'boolean');
    const v = await qmp.execute<{ qemu: { major: number; minor: number }; package: string }>('query-version');
    assert.ok(v.qemu.major >= 2, JSON.stringify(v));
  });

  test('concurrent commands are matched to their replies', async () => {
    const [a, b, c] = await Promise.all([
      qmp.execute<{ qemu: { major: number } }>('query-version'),
      qmp.execute<{ status: string }>('query-status'),
      qmp.execute<{ name?: string }>('query-name'),
    ]);
    assert.ok(a.qemu.major >= 2);
    assert.equal(typeof b.status, 'string');
    assert.equal(typeof c, 'object');
  });

  test('an unknown command rejects with the QMP error', async () => {
    await assert.rejects(qmp.execute('no-such-command'), (e: unknown) => {
      assert.ok(e instanceof QmpError);
      assert.equal(e.qmpClass, 'CommandNotFound');
      assert.match(e.desc, /no-such-command/);
      return true;
    });
    await assert.rejects(qmp.execute('query-status', { bogus: 1 }), (e: unknown) => {
      assert.ok(e instanceof QmpError);
      assert.equal(e.qmpClass, 'GenericError');
      return true;
    });
    // The connection is still usable after errors.
    assert.equal(typeof (await qmp.execute<{ status: string }>('query-status')).status, 'string');
  });

  test('quit closes the connection and ends QEMU', async () => {
    const closed = once(qmp, 'close');
    const exited = once(qemu.child, 'exit');
    const events: string[] = [];
    qmp.on('event', (name: string) => events.push(name));
    await qmp.execute('quit').catch(() => undefined); // the reply may lose the race with the close
    await closed;
    const [code] = await exited;
    assert.equal(code, 0);
    assert.ok(events.includes('SHUTDOWN'), `events: ${events.join(',')}`);
    assert.equal(qmp.isClosed, true);
    await assert.rejects(qmp.execute('query-status'), /connection closed/);
  });
});

/** A fake QMP server on a unix socket, so the test controls how bytes are chunked. */
async function fakeServer(name: string, onConn: (s: Socket) => void): Promise<{ server: Server; path: string }> {
  const path = join(dir, `${name}.sock`);
  const conns = new Set<Socket>();
  const server = createServer((s) => {
    conns.add(s);
    onConn(s);
  });
  server.listen(path);
  await once(server, 'listening');
  servers.push({ server, conns });
  return { server, path };
}

/** Reads the client's commands line by line. */
function commands(s: Socket): AsyncGenerator<{ execute: string; id: number; arguments?: unknown }> {
  const parser = new JsonLineParser();
  const queue: Record<string, unknown>[] = [];
  let wake: (() => void) | undefined;
  s.setEncoding('utf8');
  s.on('data', (d: string) => {
    queue.push(...parser.push(d));
    wake?.();
  });
  return (async function* () {
    for (;;) {
      while (queue.length) yield queue.shift() as { execute: string; id: number };
      await new Promise<void>((r) => (wake = r));
    }
  })();
}

describe('QMP framing with a fake server', () => {
  test('partial chunks, several messages per chunk, out-of-order replies, events', async () => {
    const { path } = await fakeServer('chunks', async (s) => {
      const cmds = commands(s);
      const greeting = '{"QMP": {"version": {"qemu": {"major": 7}}, "capabilities": []}}\n';
      s.write(greeting.slice(0, 10));
      await sleep(20);
      s.write(greeting.slice(10));
      const caps = (await cmds.next()).value!;
      assert.equal(caps.execute, 'qmp_capabilities');
      // Reply + an event in one chunk.
      s.write(
        `{"return": {}, "id": ${caps.id}}\n{"event": "EARLY", "data": {"n": 1}, "timestamp": {"seconds": 1, "microseconds": 2}}\n`,
      );
      const a = (await cmds.next()).value!;
      const b = (await cmds.next()).value!;
      // Answer b first, then a, split in the middle of a's line.
      const both = `{"return": "${b.execute}", "id": ${b.id}}\r\n{"event": "MID", "timestamp": {"seconds": 3, "microseconds": 4}}\n{"return": "${a.execute}", "id": ${a.id}}\n`;
      const cut = both.length - 12;
      s.write(both.slice(0, cut));
      await sleep(20);
      s.write(both.slice(cut));
      const c = (await cmds.next()).value!;
      const desc = `no ${JSON.stringify(c.arguments)}`;
      s.write(JSON.stringify({ error: { class: 'DeviceNotFound', desc }, id: c.id }) + '\n');
    });
    const qmp = await connect(path, 2000);
    const events: [string, unknown, unknown][] = [];
    qmp.on('event', (name: string, data: unknown, ts: unknown) => events.push([name, data, ts]));
    const [ra, rb] = await Promise.all([qmp.execute('cmd-a'), qmp.execute('cmd-b')]);
    assert.equal(ra, 'cmd-a');
    assert.equal(rb, 'cmd-b');
    await assert.rejects(qmp.execute('cmd-c', { x: 1 }), (e: unknown) => {
      assert.ok(e instanceof QmpError);
      assert.equal(e.qmpClass, 'DeviceNotFound');
      assert.equal(e.desc, 'no {"x":1}');
      assert.equal(e.command, 'cmd-c');
      return true;
    });
    assert.deepEqual(
      events.map((e) => e[0]).filter((n) => n === 'MID'),
      ['MID'],
    );
    assert.deepEqual(events.find((e) => e[0] === 'MID')?.[2], { seconds: 3, microseconds: 4 });
    qmp.close();
  });

  test('a socket that closes with commands pending rejects them and emits close once', async () => {
    const { path } = await fakeServer('drop', async (s) => {
      const cmds = commands(s);
      s.write('{"QMP": {}}\n');
      const caps = (await cmds.next()).value!;
      s.write(`{"return": {}, "id": ${caps.id}}\n`);
      await cmds.next(); // the pending command: never answered
      s.destroy();
    });
    const qmp = await connect(path, 2000);
    let closes = 0;
    qmp.on('close', () => closes++);
    await assert.rejects(qmp.execute('query-status'), /query-status: connection closed/);
    qmp.close();
    await sleep(10);
    assert.equal(closes, 1);
  });

  test('connect gives up when nothing listens, and when no greeting comes', async () => {
    await assert.rejects(QmpClient.connect(join(dir, 'missing.sock'), 100), /QMP connect .*missing\.sock/);
    const { path } = await fakeServer('mute', () => {});
    await assert.rejects(QmpClient.connect(path, 200), /QMP handshake timed out/);
  });

  test('a peer that sends a line without end is cut off: pending commands reject naming why, memory stays bounded', async () => {
    const { path } = await fakeServer('flood', async (s) => {
      const cmds = commands(s);
      s.write('{"QMP": {}}\n');
      const caps = (await cmds.next()).value!;
      s.write(`{"return": {}, "id": ${caps.id}}\n`);
      await cmds.next();
      // 64 KiB chunks, never a newline, well past the client's 256 KiB bound
      const chunk = 'x'.repeat(64 * 1024);
      for (let i = 0; i < 16 && !s.destroyed; i++) await new Promise((r) => s.write(chunk, r));
      s.end(); // without the bound, the client would only see the close, not why
    });
    const qmp = await QmpClient.connect(path, 2000, 256 * 1024);
    await assert.rejects(
      qmp.execute('query-status'),
      /query-status: connection closed \(a QMP message longer than 262144 characters without a newline\)/,
    );
    assert.equal(qmp.isClosed, true);
  });

  test('the line parser refuses a line past its bound and starts clean after it', () => {
    const p = new JsonLineParser(16);
    assert.deepEqual(p.push('{"a": 1}\n{"b":'), [{ a: 1 }]);
    assert.throws(() => p.push(' "0123456789"'), LineTooLong);
    assert.deepEqual(p.push('{"c": 2}\n'), [{ c: 2 }]);
  });

  test('the line parser handles every split point', () => {
    const stream = '{"a": 1}\n{"b": "x\\u00e9y"}\r\n\n{"c": [1, 2]}\nnot json\n{"d": {}}\n';
    for (let cut = 0; cut <= stream.length; cut++) {
      const p = new JsonLineParser();
      const got = [...p.push(stream.slice(0, cut)), ...p.push(stream.slice(cut))];
      assert.deepEqual(got, [{ a: 1 }, { b: 'xéy' }, { c: [1, 2] }, { d: {} }], `cut at ${cut}`);
    }
  });
});
