import dgram from 'node:dgram';
import net from 'node:net';
import * as packet from 'dns-packet';
import pLimit from 'p-limit';

/**
 * Maps (asking instance's IP, instance name) to the IP of that name among
 * the asking instance's user's instances, or undefined (-> NXDOMAIN). Called
 * for every query: no caching here, so deletes are visible at once.
 */
export type InternalResolver = (clientIp: string, name: string) => string | undefined | Promise<string | undefined>;

export interface InternalDnsOptions {
  /** address to bind: the bridge's gateway address in production, 127.0.0.1 in tests */
  host: string;
  /** default 53; 0 picks a free port (UDP and TCP then share the UDP port) */
  port?: number;
  resolve: InternalResolver;
  /** also serve DNS over TCP on the same port (default true) */
  tcp?: boolean;
  /** the private zone (default `internal`) */
  zone?: string;
  /** called when the resolver throws (the query gets SERVFAIL) */
  onError?: (e: unknown) => void;
}

const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;
/** TTL 0: answers must not outlive the instance they name. */
const TTL = 0;
const MAX_TCP_MESSAGE = 4096;
/** TCP connections at once from one address (a guest), and in all: past either a new one is closed at once. */
export const MAX_TCP_PER_CLIENT = 16;
export const MAX_TCP_CONNECTIONS = 256;
/** Queries one TCP connection may have waiting for their answers; past it the connection is closed. */
export const MAX_TCP_PIPELINE = 32;

/**
 * The `.internal` DNS server. Authoritative for the zone only: it never
 * recurses and refuses every other name, so guests cannot use it to reach
 * the outside (nor to probe what the host can resolve).
 */
export class InternalDns {
  private udp?: dgram.Socket;
  private tcpServer?: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private readonly perClient = new Map<string, number>();
  private readonly zone: string;

  constructor(private readonly opts: InternalDnsOptions) {
    this.zone = (opts.zone ?? 'internal').toLowerCase();
  }

  /**
   * Binds UDP (and TCP on the same port); resolves with the bound port. Call
   * once. With port 0 the UDP port is the kernel's pick, and the same TCP port
   * may be in use (an ephemeral port of some connection): then it tries again.
   */
  async start(): Promise<{ host: string; port: number }> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.bind();
      } catch (e) {
        const retry =
          (this.opts.port ?? 53) === 0 && (e as NodeJS.ErrnoException).code === 'EADDRINUSE' && attempt < 10;
        if (!retry) throw e;
        await this.stop();
      }
    }
  }

  private async bind(): Promise<{ host: string; port: number }> {
    const udp = dgram.createSocket({ type: this.opts.host.includes(':') ? 'udp6' : 'udp4' });
    this.udp = udp;
    udp.on('message', (msg, rinfo) => {
      // a query the resolver could not answer (the store unreachable) gets no answer: the guest retries
      void this.answer(msg, rinfo.address).then(
        (r) => r && udp.send(r, rinfo.port, rinfo.address),
        (e: unknown) => this.opts.onError?.(e),
      );
    });
    await new Promise<void>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind(this.opts.port ?? 53, this.opts.host, () => {
        udp.off('error', reject);
        resolve();
      });
    });
    udp.on('error', (e) => this.opts.onError?.(e));
    const port = udp.address().port;
    if (this.opts.tcp !== false) await this.startTcp(port);
    return { host: this.opts.host, port };
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await Promise.all([
      new Promise<void>((r) => (this.udp ? this.udp.close(() => r()) : r())),
      new Promise<void>((r) => (this.tcpServer ? this.tcpServer.close(() => r()) : r())),
    ]);
    this.udp = undefined;
    this.tcpServer = undefined;
  }

  private async startTcp(port: number): Promise<void> {
    const server = net.createServer((sock) => this.serveTcp(sock));
    this.tcpServer = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, this.opts.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  }

  /** DNS over TCP: 2-byte length prefix per message (RFC 1035 4.2.2). */
  private serveTcp(sock: net.Socket): void {
    const client = (sock.remoteAddress ?? '').replace(/^::ffff:/, '');
    const mine = this.perClient.get(client) ?? 0;
    if (mine >= MAX_TCP_PER_CLIENT || this.sockets.size >= MAX_TCP_CONNECTIONS) return void sock.destroy();
    this.perClient.set(client, mine + 1);
    this.sockets.add(sock);
    sock.setTimeout(10_000, () => sock.destroy());
    sock.on('close', () => {
      this.sockets.delete(sock);
      const n = (this.perClient.get(client) ?? 1) - 1;
      if (n > 0) this.perClient.set(client, n);
      else this.perClient.delete(client);
    });
    sock.on('error', () => sock.destroy());
    let buf = Buffer.alloc(0);
    const inOrder = pLimit(1);
    sock.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 2) {
        const len = buf.readUInt16BE(0);
        if (len > MAX_TCP_MESSAGE) return void sock.destroy();
        if (buf.length < 2 + len) break;
        const msg = buf.subarray(2, 2 + len);
        buf = buf.subarray(2 + len);
        // a client that pipelines faster than it reads its answers is cut off, not queued without end
        if (inOrder.pendingCount >= MAX_TCP_PIPELINE) return void sock.destroy();
        // in order: answers go back in the order the queries came
        void inOrder(async () => {
          const r = await this.answer(msg, client);
          if (r && !sock.destroyed) sock.write(Buffer.concat([u16(r.length), r]));
        }).catch(() => sock.destroy());
      }
    });
  }

  /** One query in, one response out (or nothing for garbage / responses). */
  async answer(msg: Buffer, clientIp: string): Promise<Buffer | undefined> {
    if (msg.length < 12 || msg.readUInt16BE(2) & 0x8000) return undefined; // too short or a response
    const head = msg.readUInt16BE(2);
    const base = { id: msg.readUInt16BE(0), head, questions: [] as packet.Question[] };
    let q: packet.DecodedPacket;
    try {
      q = packet.decode(msg);
    } catch {
      return reply(base, RCODE.FORMERR);
    }
    const r = { ...base, questions: q.questions ?? [], edns: (q.additionals ?? []).some((a) => a.type === 'OPT') };
    if ((head >> 11) & 0xf) return reply(r, RCODE.NOTIMP); // only standard queries
    if (r.questions.length !== 1) return reply(r, RCODE.FORMERR);
    const question = r.questions[0]!;
    const name = question.name.toLowerCase().replace(/\.$/, '');
    const suffix = `.${this.zone}`;
    if (name !== this.zone && !name.endsWith(suffix)) return reply(r, RCODE.REFUSED);
    if ((question.class ?? 'IN') !== 'IN' && question.class !== 'ANY') return reply(r, RCODE.REFUSED);
    if (name === this.zone) return reply(r, RCODE.NOERROR, [], this.soa());
    let ip: string | undefined;
    try {
      ip = await this.opts.resolve(clientIp, name.slice(0, -suffix.length));
    } catch (e) {
      this.opts.onError?.(e);
      return reply(r, RCODE.SERVFAIL);
    }
    if (!ip) return reply(r, RCODE.NXDOMAIN, [], this.soa());
    const wantsA = question.type === 'A' || (question.type as string) === 'ANY';
    if (!wantsA) return reply(r, RCODE.NOERROR, [], this.soa()); // the name exists, no such record (NODATA)
    return reply(r, RCODE.NOERROR, [{ type: 'A', name: question.name, ttl: TTL, data: ip }]);
  }

  /** SOA in negative answers, minimum 0: resolvers must not cache NXDOMAIN either. */
  private soa(): packet.Answer[] {
    return [
      {
        type: 'SOA',
        name: this.zone,
        ttl: TTL,
        data: {
          mname: `ns.${this.zone}`,
          rname: `hostmaster.${this.zone}`,
          serial: 1,
          refresh: 60,
          retry: 60,
          expire: 60,
          minimum: TTL,
        },
      },
    ];
  }
}

const u16 = (n: number): Buffer => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
};

interface ReplyBase {
  id: number;
  head: number;
  questions: packet.Question[];
  edns?: boolean;
}

function reply(q: ReplyBase, rcode: number, answers: packet.Answer[] = [], authorities: packet.Answer[] = []): Buffer {
  // QR + AA, RD echoed, opcode echoed, RA never set (no recursion).
  const flags = packet.AUTHORITATIVE_ANSWER | (q.head & packet.RECURSION_DESIRED) | (q.head & 0x7800) | rcode;
  const additionals: packet.Answer[] = q.edns
    ? [{ type: 'OPT', name: '.', udpPayloadSize: 1232, flags: 0 } as packet.Answer]
    : [];
  return packet.encode({
    type: 'response',
    id: q.id,
    flags,
    questions: q.questions,
    answers,
    authorities,
    additionals,
  });
}
