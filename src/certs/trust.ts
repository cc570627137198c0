import { X509Certificate } from 'node:crypto';
import { rootCertificates } from 'node:tls';
import { readFileSync } from 'node:fs';

/**
 * Whether an uploaded chain proves control of its names: it verifies, link
 * by link (signatures, not only names), up to a root the platform trusts:
 * Node's bundled public roots (the ones browsers trust: their CAs validated
 * the names before issuing) plus the operator's `acme.uploadTrustedCa` file
 * (a private CA). A self-signed certificate, or one of an unknown CA, proves
 * nothing: it is served for its owner but claims no name (docs/certificates.md).
 */
export class TrustAnchors {
  private anchors: X509Certificate[] | undefined;

  constructor(private readonly extraFile?: string) {}

  private load(): X509Certificate[] {
    if (this.anchors) return this.anchors;
    const pems = [...rootCertificates];
    if (this.extraFile) pems.push(...splitPem(readFileSync(this.extraFile, 'utf8')));
    const out: X509Certificate[] = [];
    for (const p of pems) {
      try {
        out.push(new X509Certificate(p));
      } catch {
        // a root Node cannot parse is one that cannot anchor anything
      }
    }
    return (this.anchors = out);
  }

  /** `chain` leaf first (already checked to be ordered by checkUpload). */
  proves(chain: X509Certificate[], now: number): boolean {
    if (chain.length === 0) return false;
    const current = (c: X509Certificate): boolean => Date.parse(c.validFrom) <= now && now < Date.parse(c.validTo);
    // `parent` signed `child`: a CA certificate, valid now, named as the issuer, whose key verifies the signature
    const signed = (child: X509Certificate, parent: X509Certificate): boolean =>
      parent.ca && current(parent) && child.issuer === parent.subject && child.verify(parent.publicKey);
    for (let i = 1; i < chain.length; i++) if (!signed(chain[i - 1]!, chain[i]!)) return false;
    const top = chain[chain.length - 1]!;
    return this.load().some((a) => (a.fingerprint256 === top.fingerprint256 && current(a)) || signed(top, a));
  }
}

function splitPem(text: string): string[] {
  return text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
}
