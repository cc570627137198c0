import type { KeyPair } from '../gateway/types.js';

/** The ACME challenge types unihost answers (docs/certificates.md). */
export type ChallengeType = 'http-01' | 'tls-alpn-01';

/**
 * Pending ACME challenges while an order is being validated, in memory only
 * (an order that outlives the daemon is simply tried again):
 *
 * * HTTP-01: the key authorization the data plane answers for
 *   `http://<host>/.well-known/acme-challenge/<token>`;
 * * TLS-ALPN-01 (RFC 8737): the self-signed certificate carrying the
 *   `acmeIdentifier` extension that the data plane presents to a client
 *   asking for `<host>` with ALPN `acme-tls/1`. The data plane is told of
 *   changes through `onAlpnChange`, since it installs certificates ahead of
 *   handshakes rather than asking per handshake.
 */
export class ChallengeAnswers {
  private readonly byHost = new Map<string, Map<string, string>>();
  private readonly alpnByHost = new Map<string, KeyPair>();
  private readonly alpnListeners = new Set<() => void | Promise<void>>();
  private readonly httpListeners = new Set<() => void | Promise<void>>();

  /**
   * Answers `token` for `host` until `remove`; resolves once the data plane
   * routes the host's challenge path (HAProxy sends it to the activator
   * only for names published on port 80), so the authority is not asked to
   * validate before.
   */
  async add(host: string, token: string, keyAuthorization: string): Promise<void> {
    const h = host.toLowerCase();
    const m = this.byHost.get(h) ?? new Map<string, string>();
    m.set(token, keyAuthorization);
    this.byHost.set(h, m);
    await Promise.all([...this.httpListeners].map(async (fn) => fn()));
  }

  /** Calls `fn` on every new HTTP-01 challenge (awaited by `add`); returns the unsubscribe. */
  onHttpChallenge(fn: () => void | Promise<void>): () => void {
    this.httpListeners.add(fn);
    return () => this.httpListeners.delete(fn);
  }

  remove(host: string, token: string): void {
    const h = host.toLowerCase();
    const m = this.byHost.get(h);
    m?.delete(token);
    if (m?.size === 0) this.byHost.delete(h);
  }

  /** The answer for (host, token), or undefined (the data plane goes on as usual). */
  answer(host: string, token: string): string | undefined {
    return this.byHost.get(host.toLowerCase())?.get(token);
  }

  /** hosts with an HTTP-01 challenge open */
  hosts(): string[] {
    return [...this.byHost.keys()];
  }

  /**
   * Presents `pair` for `host` to `acme-tls/1` clients until `removeAlpn`;
   * resolves once the data plane serves it (HAProxy: after a reload), so the
   * authority is not asked to validate before.
   */
  addAlpn(host: string, pair: KeyPair): Promise<void> {
    this.alpnByHost.set(host.toLowerCase(), pair);
    return this.alpnChanged();
  }

  removeAlpn(host: string): void {
    if (this.alpnByHost.delete(host.toLowerCase())) void this.alpnChanged();
  }

  /** The TLS-ALPN-01 certificates to present now, one per host. */
  alpnCertificates(): { name: string; pair: KeyPair }[] {
    return [...this.alpnByHost].map(([name, pair]) => ({ name, pair }));
  }

  /** Calls `fn` after every change of the TLS-ALPN-01 set (awaited by `addAlpn`); returns the unsubscribe. */
  onAlpnChange(fn: () => void | Promise<void>): () => void {
    this.alpnListeners.add(fn);
    return () => this.alpnListeners.delete(fn);
  }

  private async alpnChanged(): Promise<void> {
    await Promise.all([...this.alpnListeners].map(async (fn) => fn()));
  }
}

/**
 * The challenge an order uses (docs/certificates.md). The authority
 * validates on port 80 (HTTP-01) or 443 (TLS-ALPN-01) only: HTTP-01 where the
 * group publishes port 80, else TLS-ALPN-01 where it publishes 443. A failed
 * attempt tries the other type next time (where 443 is published), so a host
 * that the authority reaches on only one of the two still gets its
 * certificate. HTTP-01 without port 80 in the group is answered on the
 * port-80 route the gateway adds for custom names (src/reconcile/gateway.ts).
 */
export function challengeFor(publishedPorts: number[], attempt: number): ChallengeType {
  const canAlpn = publishedPorts.includes(443);
  const preferred: ChallengeType = publishedPorts.includes(80) || !canAlpn ? 'http-01' : 'tls-alpn-01';
  if (!canAlpn || attempt % 2 === 1) return preferred;
  return preferred === 'http-01' ? 'tls-alpn-01' : 'http-01';
}
