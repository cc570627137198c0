import type { KeyPair } from '../gateway/types.js';

/**
 * What the certificate logic needs from a data plane, and nothing more, so
 * that the HAProxy data plane (src/gateway/haproxy/) and a test double can
 * both serve it:
 *
 * * `setCertificates`: serve exactly these pairs for these custom names from
 *   the next handshake on (the whole set each time; open connections keep
 *   theirs; a custom name left out has no certificate and is refused). Returns
 *   the names whose pair could not be loaded.
 * * `setAlpnChallenges`: TLS-ALPN-01 (RFC 8737): on the TLS ports, a client
 *   whose ClientHello asks for `<name>` with ALPN `acme-tls/1` gets the
 *   challenge certificate and `acme-tls/1` (the whole set each time; other
 *   clients never see it); a promise resolves once they are served.
 * * HTTP-01: the data plane answers `GET /.well-known/acme-challenge/<token>`
 *   on port 80 for any host, before any routing or redirect, with what
 *   `ChallengeAnswers.answer(host, token)` gives (src/certs/challenges.ts).
 */
export interface CertificateDataPlane {
  setCertificates(certs: { names: string[]; pair: KeyPair }[]): string[];
  setAlpnChallenges(certs: { name: string; pair: KeyPair }[]): void | Promise<void>;
}
