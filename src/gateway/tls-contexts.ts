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
 * metro domain, `certFor` for custom FQDNs (falling back to the wildcard
 * while a custom certificate is pending, so the client sees a name mismatch
 * rather than a closed socket). Contexts are cached by certificate text.
 */
export class TlsContexts {
  private readonly cache = new Map<string, tls.SecureContext>();
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

  /** The context for a (normalized) server name. */
  forName(sni: string): tls.SecureContext {
    if (sni === this.metroDomain || sni.endsWith(`.${this.metroDomain}`) || !this.certFor) return this.wildcard;
    const pair = this.certFor(sni);
    if (!pair) return this.wildcard;
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
