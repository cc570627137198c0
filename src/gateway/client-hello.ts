/**
 * Reads the server name (SNI) out of a TLS ClientHello before any TLS state
 * exists, so that an unknown name is refused with an `unrecognized_name`
 * alert and never reaches another user's certificate or backend, and so that
 * garbage is dropped after a few bytes (RFC 8446 5.1, 4.1.2; RFC 6066 3).
 */

/** Largest ClientHello accepted (post-quantum key shares make them ~2 KiB; 64 KiB is the protocol's own bound). */
const MAX_HELLO = 64 * 1024;
const MAX_RECORD = 16 * 1024 + 256;

export type HelloParse =
  | { kind: 'more' }
  | { kind: 'hello'; sni: string | undefined; alpn: string[] }
  | { kind: 'http' }
  | { kind: 'garbage'; why: string };

/** A fatal TLS alert record (level 2) with the given description, e.g. 112 unrecognized_name. */
export function tlsAlert(description: number): Buffer {
  return Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, description]);
}

export const ALERT_UNRECOGNIZED_NAME = 112;
export const ALERT_DECODE_ERROR = 50;
/** sent for a custom name whose certificate is not issued yet (pending) */
export const ALERT_HANDSHAKE_FAILURE = 40;

/** Parses what has arrived so far; `more` asks for more bytes. */
export function parseClientHello(buf: Buffer): HelloParse {
  if (buf.length === 0) return { kind: 'more' };
  if (buf[0] !== 0x16) {
    // Plain HTTP on a TLS port is a common mistake worth a readable answer.
    return /^[A-Z]{3,7} /.test(buf.subarray(0, 8).toString('latin1'))
      ? { kind: 'http' }
      : { kind: 'garbage', why: 'not a TLS handshake record' };
  }
  const parts: Buffer[] = [];
  let have = 0;
  for (let o = 0; ;) {
    if (buf.length < o + 5) return { kind: 'more' };
    if (buf[o] !== 0x16) return { kind: 'garbage', why: 'record other than handshake before the ClientHello ended' };
    const len = buf.readUInt16BE(o + 3);
    if (len === 0 || len > MAX_RECORD) return { kind: 'garbage', why: `bad record length ${len}` };
    if (buf.length < o + 5 + len) return { kind: 'more' };
    parts.push(buf.subarray(o + 5, o + 5 + len));
    have += len;
    o += 5 + len;
    if (have < 4) continue;
    const hs = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
    if (hs[0] !== 0x01) return { kind: 'garbage', why: 'first handshake message is not a ClientHello' };
    const msgLen = hs.readUIntBE(1, 3);
    if (msgLen > MAX_HELLO) return { kind: 'garbage', why: 'ClientHello too large' };
    if (have >= 4 + msgLen) return readHello(hs.subarray(4, 4 + msgLen));
  }
}

/** Walks the ClientHello body's extensions for server_name (0) and ALPN (16, RFC 7301). */
function readHello(b: Buffer): HelloParse {
  try {
    let p = 2 + 32; // legacy_version, random
    p += 1 + b.readUInt8(p); // session id
    p += 2 + b.readUInt16BE(p); // cipher suites
    p += 1 + b.readUInt8(p); // compression methods
    const out: HelloParse = { kind: 'hello', sni: undefined, alpn: [] };
    if (p >= b.length) return out;
    const end = Math.min(b.length, p + 2 + b.readUInt16BE(p));
    p += 2;
    while (p + 4 <= end) {
      const type = b.readUInt16BE(p);
      const len = b.readUInt16BE(p + 2);
      p += 4;
      if (p + len > end) break;
      if (type === 0) out.sni = readServerName(b.subarray(p, p + len));
      if (type === 16) out.alpn = readAlpn(b.subarray(p, p + len));
      p += len;
    }
    return out;
  } catch {
    return { kind: 'garbage', why: 'truncated ClientHello' };
  }
}

function readAlpn(ext: Buffer): string[] {
  const out: string[] = [];
  const listEnd = Math.min(ext.length, 2 + ext.readUInt16BE(0));
  for (let p = 2; p + 1 <= listEnd;) {
    const len = ext.readUInt8(p);
    p += 1;
    if (p + len > listEnd) break;
    out.push(ext.subarray(p, p + len).toString('latin1'));
    p += len;
  }
  return out;
}

function readServerName(ext: Buffer): string | undefined {
  const listEnd = Math.min(ext.length, 2 + ext.readUInt16BE(0));
  for (let p = 2; p + 3 <= listEnd;) {
    const type = ext.readUInt8(p);
    const len = ext.readUInt16BE(p + 1);
    p += 3;
    if (type === 0 && p + len <= listEnd) return normalizeHost(ext.subarray(p, p + len).toString('latin1'));
    p += len;
  }
  return undefined;
}

/** Lower case, no trailing dot, no port: the form route FQDNs are kept in. Undefined when not a plausible host name. */
export function normalizeHost(h: string | undefined): string | undefined {
  if (!h) return undefined;
  let s = h.toLowerCase();
  const colon = s.lastIndexOf(':');
  if (colon !== -1 && !s.includes(']')) s = s.slice(0, colon);
  if (s.endsWith('.')) s = s.slice(0, -1);
  return s.length > 0 && s.length <= 253 && /^[a-z0-9.-]+$/.test(s) ? s : undefined;
}
