import tls from 'node:tls';
import type { KeyPair } from './types.js';

/**
 * TLS 1.2 suites of Mozilla's "intermediate" profile: ECDHE key exchange and
 * AEAD ciphers only. TLS 1.3 uses OpenSSL's defaults (all AEAD).
 */
export const TLS12_CIPHERS = [
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

export const TLS_BASE: tls.SecureContextOptions = {
  minVersion: 'TLSv1.2',
  maxVersion: 'TLSv1.3',
  ciphers: TLS12_CIPHERS,
  honorCipherOrder: true,
};

/**
 * Secure contexts per certificate: the metro wildcard for names under the
 * metro domain; for custom FQDNs the certificates installed with
 * `setCustom`, else `certFor`. A custom name with neither has no context
 * (`has` is false): the listener refuses it with an alert, since the
 * wildcard would only show the client a name mismatch. Contexts are cached
 * by certificate text.
 */
export class TlsContexts {
  private readonly cache = new Map<string, tls.SecureContext>();
  private custom = new Map<string, tls.SecureContext>();
  private alpnChallenges = new Map<string, tls.SecureContext>();
  private wildcard: tls.SecureContext;

  constructor(
    private readonly metroDomain: string,
    private pair: KeyPair,
    private readonly certFor?: (sni: string) => KeyPair | undefined,
  ) {
    this.wildcard = tls.createSecureContext({ ...TLS_BASE, ...pair });
  }

  /** Replaces the wildcard certificate (renewal); open connections keep theirs. */
  setWildcard(pair: KeyPair): void {
    this.pair = pair;
    this.wildcard = tls.createSecureContext({ ...TLS_BASE, ...pair });
  }

  get defaultPair(): KeyPair {
    return this.pair;
  }

  /**
   * Installs the certificates of custom names, replacing the whole set:
   * new handshakes use them at once, open connections keep theirs. Returns
   * the names whose pair OpenSSL refused (they have none).
   */
  setCustom(certs: { names: string[]; pair: KeyPair }[]): string[] {
    const m = new Map<string, tls.SecureContext>();
    const failed: string[] = [];
    for (const c of certs) {
      let ctx: tls.SecureContext;
      try {
        ctx = this.contextFor(c.pair);
      } catch {
        failed.push(...c.names); // a broken pair must not take the others down
        continue;
      }
      for (const n of c.names) m.set(n.toLowerCase().replace(/\.$/, ''), ctx);
    }
    this.custom = m;
    if (this.cache.size > 2 * m.size + 100) {
      // drop contexts of certificates no longer installed
      const keep = new Set(m.values());
      for (const [k, v] of this.cache) if (!keep.has(v)) this.cache.delete(k);
    }
    return failed;
  }

  /**
   * Replaces the TLS-ALPN-01 challenge certificates (RFC 8737), shown only
   * to clients that ask for `acme-tls/1` (the authority's validator), never
   * in place of a name's real certificate.
   */
  setAlpnChallenges(certs: { name: string; pair: KeyPair }[]): void {
    const m = new Map<string, tls.SecureContext>();
    for (const c of certs)
      m.set(c.name.toLowerCase().replace(/\.$/, ''), tls.createSecureContext({ ...TLS_BASE, ...c.pair }));
    this.alpnChallenges = m;
  }

  /** The challenge context for a (normalized) name, if an order is being validated. */
  alpnChallenge(sni: string): tls.SecureContext | undefined {
    return this.alpnChallenges.get(sni);
  }

  private isMetro(sni: string): boolean {
    return sni === this.metroDomain || sni.endsWith(`.${this.metroDomain}`);
  }

  /** Whether a (normalized) name has a certificate to show. */
  has(sni: string): boolean {
    return this.isMetro(sni) || this.custom.has(sni) || this.certFor?.(sni) !== undefined;
  }

  /** The context for a (normalized) server name (the wildcard when it has none: see `has`). */
  forName(sni: string): tls.SecureContext {
    if (this.isMetro(sni)) return this.wildcard;
    const installed = this.custom.get(sni);
    if (installed) return installed;
    const pair = this.certFor?.(sni);
    return pair ? this.contextFor(pair) : this.wildcard;
  }

  private contextFor(pair: KeyPair): tls.SecureContext {
    const key = pair.cert;
    let ctx = this.cache.get(key);
    if (!ctx) {
      ctx = tls.createSecureContext({ ...TLS_BASE, ...pair });
      if (this.cache.size > 1000) this.cache.clear(); // bounded; rebuilt on demand
      this.cache.set(key, ctx);
    }
    return ctx;
  }
}
