import tls from 'node:tls';
import type { KeyPair } from '../types.js';
import { listenLoopback } from './loopback.js';

/** RFC 8737's ALPN protocol: the authority's validator offers only this one. */
export const ACME_TLS_ALPN = 'acme-tls/1';

/**
 * TLS-ALPN-01 answers (RFC 8737) as a TLS listener on 127.0.0.1 that HAProxy
 * hands the connections of `acme-tls/1` clients to (config.ts renders that
 * pre-inspection only while challenges exist): the challenge certificate for
 * the SNI, `acme-tls/1`, then close. A name without a challenge has no
 * certificate here and its handshake fails.
 */
export class AcmeTlsServer {
  private readonly server: tls.Server;
  private contexts = new Map<string, tls.SecureContext>();
  port = 0;

  constructor() {
    this.server = tls.createServer({
      ALPNProtocols: [ACME_TLS_ALPN],
      SNICallback: (name, cb) => {
        const ctx = this.contexts.get(name.toLowerCase().replace(/\.$/, ''));
        if (ctx) cb(null, ctx);
        else cb(new Error(`no TLS-ALPN-01 challenge for ${name}`));
      },
    });
    this.server.on('secureConnection', (s) => s.end());
    this.server.on('tlsClientError', (_e, s) => s.destroy());
  }

  /** The whole set of challenges; returns the names that have one (lower case, no trailing dot). */
  set(certs: { name: string; pair: KeyPair }[]): string[] {
    const m = new Map<string, tls.SecureContext>();
    for (const c of certs) {
      const name = c.name.toLowerCase().replace(/\.$/, '');
      if (!/^[a-z0-9.-]+$/.test(name)) continue; // the names are written into haproxy.cfg
      try {
        m.set(name, tls.createSecureContext({ cert: c.pair.cert, key: c.pair.key }));
      } catch {
        // a pair that does not load cannot be presented; the validation fails and the order says why
      }
    }
    this.contexts = m;
    return [...m.keys()].sort();
  }

  async listen(): Promise<number> {
    this.port = await listenLoopback(this.server);
    return this.port;
  }

  close(): Promise<void> {
    return new Promise((r) => this.server.close(() => r()));
  }
}
