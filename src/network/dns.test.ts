import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import net from 'node:net';
import { Resolver } from 'node:dns/promises';
import * as packet from 'dns-packet';
import { InternalDns, MAX_TCP_PER_CLIENT, MAX_TCP_PIPELINE } from './dns.js';

// Two "users": instances asking from 127.0.0.2 belong to alice, from
// 127.0.0.3 to bob (the whole 127/8 is local, so a client can pick its source).
const table = new Map<string, Map<string, string>>([
  [
    '127.0.0.2',
    new Map([
      ['web', '10.88.0.2'],
      ['db.eu', '10.88.0.3'],
    ]),
  ],
  ['127.0.0.3', new Map([['api', '10.88.0.4']])],
]);
const asked: [string, string][] = [];

function resolver(from: string, port: number): Resolver {
  const r = new Resolver({ timeout: 2000, tries: 1 });
  r.setServers([`127.0.0.1:${port}`]);
  r.setLocalAddress(from);
  return r;
}

/** dns-packet decodes the rcode but its types do not declare it. */
const rcode = (p: packet.DecodedPacket): string | undefined => (p as { rcode?: string }).rcode;

/** One raw query from alice's address (127.0.0.2). */
async function rawUdp(port: number, msg: Buffer): Promise<packet.DecodedPacket> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.2', r));
  try {
    return await new Promise((resolve, reject) => {
      s.once('message', (m) => resolve(packet.decode(m)));
      s.once('error', reject);
      s.send(msg, port, '127.0.0.1');
    });
  } finally {
    s.close();
  }
}

describe('InternalDns', () => {
  let dns: InternalDns;
  let port: number;

  before(async () => {
    dns = new InternalDns({
      host: '127.0.0.1',
      port: 0,
      resolve: async (client, name) => {
        asked.push([client, name]);
        if (name === 'boom') throw new Error('store down');
        return table.get(client)?.get(name);
      },
      onError: () => undefined,
    });
    ({ port } = await dns.start());
  });
  after(() => dns.stop());

  test('A for an own instance, case-insensitive, TTL 0, asked with the client IP', async () => {
    const r = resolver('127.0.0.2', port);
    assert.deepEqual(await r.resolve4('web.internal', { ttl: true }), [{ address: '10.88.0.2', ttl: 0 }]);
    assert.deepEqual(await r.resolve4('WEB.Internal'), ['10.88.0.2']);
    assert.deepEqual(await r.resolve4('db.eu.internal'), ['10.88.0.3'], 'names with dots');
    assert.deepEqual(asked.at(-1), ['127.0.0.2', 'db.eu']);
  });

  test('NXDOMAIN for unknown names and for instances of another user', async () => {
    const bob = resolver('127.0.0.3', port);
    await assert.rejects(bob.resolve4('web.internal'), { code: 'ENOTFOUND' });
    assert.deepEqual(await bob.resolve4('api.internal'), ['10.88.0.4']);
    await assert.rejects(resolver('127.0.0.2', port).resolve4('nosuch.internal'), { code: 'ENOTFOUND' });
    await assert.rejects(resolver('127.0.0.9', port).resolve4('web.internal'), { code: 'ENOTFOUND' }, 'unknown asker');
  });

  test('AAAA / MX for a known name: NOERROR without answers', async () => {
    const r = resolver('127.0.0.2', port);
    await assert.rejects(r.resolve6('web.internal'), { code: 'ENODATA' });
    const res = await rawUdp(
      port,
      packet.encode({ type: 'query', id: 7, questions: [{ type: 'AAAA', name: 'web.internal' }] }),
    );
    assert.equal(rcode(res), 'NOERROR');
    assert.equal(res.answers?.length, 0);
    assert.equal(res.flag_aa, true);
  });

  test('REFUSED outside .internal, never recursing', async () => {
    const before = asked.length;
    const r = resolver('127.0.0.2', port);
    await assert.rejects(r.resolve4('example.com'), { code: 'EREFUSED' });
    await assert.rejects(r.resolve4('web.internal.evil.com'), { code: 'EREFUSED' });
    const res = await rawUdp(
      port,
      packet.encode({
        type: 'query',
        id: 9,
        flags: packet.RECURSION_DESIRED,
        questions: [{ type: 'A', name: 'localhost' }],
      }),
    );
    assert.equal(rcode(res), 'REFUSED');
    assert.equal(res.flag_ra, false, 'no recursion available');
    assert.equal(res.flag_rd, true, 'RD echoed');
    assert.equal(res.id, 9);
    assert.equal(asked.length, before, 'resolver not consulted');
  });

  test('a deleted name disappears at once', async () => {
    const r = resolver('127.0.0.3', port);
    table.get('127.0.0.3')!.set('tmp', '10.88.0.9');
    assert.deepEqual(await r.resolve4('tmp.internal'), ['10.88.0.9']);
    table.get('127.0.0.3')!.delete('tmp');
    await assert.rejects(r.resolve4('tmp.internal'), { code: 'ENOTFOUND' });
  });

  test('SERVFAIL when the resolver fails; FORMERR for garbage; the server keeps serving', async () => {
    await assert.rejects(resolver('127.0.0.2', port).resolve4('boom.internal'), { code: 'ESERVFAIL' });
    const junk = Buffer.from('0102000100010000000000000377', 'hex'); // header claims a question, body cut
    const res = await rawUdp(port, junk);
    assert.equal(res.id, 0x0102);
    assert.equal(rcode(res), 'FORMERR');
    assert.deepEqual(await resolver('127.0.0.2', port).resolve4('web.internal'), ['10.88.0.2']);
  });

  test('DNS over TCP, two pipelined queries on one connection', async () => {
    const sock = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' });
    await new Promise((r) => sock.once('connect', r));
    const q = (id: number, name: string): Buffer =>
      packet.streamEncode({ type: 'query', id, questions: [{ type: 'A', name }] });
    sock.write(Buffer.concat([q(1, 'web.internal'), q(2, 'other.com')]));
    let buf = Buffer.alloc(0);
    const answers: packet.Packet[] = [];
    await new Promise<void>((resolve) => {
      sock.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
          answers.push(packet.streamDecode(buf.subarray(0, 2 + buf.readUInt16BE(0))));
          buf = buf.subarray(2 + buf.readUInt16BE(0));
        }
        if (answers.length === 2) resolve();
      });
    });
    sock.destroy();
    const [a, b] = answers as packet.DecodedPacket[];
    assert.equal(a!.id, 1);
    assert.deepEqual(
      a!.answers?.map((x) => (x as { data: string }).data),
      ['10.88.0.2'],
    );
    assert.equal(b!.id, 2);
    assert.equal(rcode(b!), 'REFUSED');
  });

  test('TCP connections are capped per client address; others still connect; a closed one frees its place', async () => {
    const open = (from: string) =>
      new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect({ port, host: '127.0.0.1', localAddress: from }, () => resolve(s));
        s.once('error', reject);
      });
    /** true when the server closed the connection (within 500 ms) */
    const closedByServer = (s: net.Socket) =>
      new Promise<boolean>((resolve) => {
        const t = setTimeout(() => resolve(false), 500);
        s.once('close', () => (clearTimeout(t), resolve(true)));
        s.resume();
      });
    const held = await Promise.all(Array.from({ length: MAX_TCP_PER_CLIENT }, () => open('127.0.0.2')));
    try {
      const extra = await open('127.0.0.2');
      assert.equal(await closedByServer(extra), true, 'one over the per-address cap is closed');
      const bob = await open('127.0.0.3');
      assert.equal(await closedByServer(bob), false, 'another address is served');
      bob.destroy();
      held.pop()!.destroy();
      await new Promise((r) => setTimeout(r, 50));
      const again = await open('127.0.0.2');
      assert.equal(await closedByServer(again), false, 'a place freed is taken again');
      again.destroy();
    } finally {
      for (const s of held) s.destroy();
    }
  });

  test('a TCP client that pipelines queries without reading the answers is cut off', async () => {
    const sock = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' });
    await new Promise((r) => sock.once('connect', r));
    const closed = new Promise((r) => sock.once('close', r));
    sock.on('error', () => undefined);
    sock.pause(); // never reads its answers
    const q = packet.streamEncode({ type: 'query', id: 7, questions: [{ type: 'A', name: 'web.internal' }] });
    sock.write(Buffer.concat(Array.from({ length: MAX_TCP_PIPELINE * 4 }, () => q)));
    // at once, not at the 10 s idle timeout
    const why = await Promise.race([
      closed.then(() => 'closed'),
      new Promise((r) => setTimeout(() => r('open'), 2000)),
    ]);
    sock.destroy();
    assert.equal(why, 'closed');
  });
});
