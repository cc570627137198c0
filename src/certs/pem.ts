import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import { err } from '../errors.js';

/** What the API shows of a certificate, read from the leaf itself. */
export interface CertInfo {
  subject: string;
  issuer: string;
  serial_number: string;
  not_before: string;
  not_after: string;
  /** DNS names the leaf is good for (SANs, else the subject CN), lower case */
  names: string[];
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Whether `name` (possibly a one-label wildcard like `*.example.com`) covers `fqdn`. */
export function nameCovers(name: string, fqdn: string): boolean {
  if (name === fqdn) return true;
  if (!name.startsWith('*.')) return false;
  const dot = fqdn.indexOf('.');
  return dot > 0 && fqdn.slice(dot + 1) === name.slice(2) && !fqdn.startsWith('*.');
}

/** Lower case, without the trailing dot. */
export const normalizeName = (n: string): string => n.trim().toLowerCase().replace(/\.$/, '');

/** The certificates of a PEM bundle, leaf first. Throws UH_INVALID naming what is wrong. */
export function parseChain(pem: string): X509Certificate[] {
  const blocks = pem.match(PEM_CERT) ?? [];
  if (blocks.length === 0) throw err('UH_INVALID', "'chain' holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  return blocks.map((b, i) => {
    try {
      return new X509Certificate(b);
    } catch (e) {
      throw err('UH_INVALID', `'chain': certificate ${i + 1} does not parse (${(e as Error).message})`);
    }
  });
}

/** A private key from PEM. The error never repeats the input. */
export function parseKey(pem: string): KeyObject {
  try {
    return createPrivateKey({ key: pem, format: 'pem' });
  } catch {
    throw err('UH_INVALID', "'pkey' is not a PEM private key (PKCS#8, PKCS#1 or SEC1, unencrypted)");
  }
}

/** DNS names of a leaf: its SANs, or its subject CN when it has none. */
export function leafNames(leaf: X509Certificate): string[] {
  const sans = (leaf.subjectAltName ?? '')
    .split(/,\s*/)
    .filter((s) => s.startsWith('DNS:'))
    .map((s) => normalizeName(s.slice(4)));
  if (sans.length > 0) return sans;
  const cn = /(?:^|\n)CN=([^\n]+)/.exec(leaf.subject)?.[1];
  return cn ? [normalizeName(cn)] : [];
}

const oneLine = (dn: string): string => dn.split('\n').filter(Boolean).join(', ');

export function certInfo(leaf: X509Certificate): CertInfo {
  return {
    subject: oneLine(leaf.subject),
    issuer: oneLine(leaf.issuer),
    serial_number: leaf.serialNumber.toLowerCase(),
    not_before: new Date(leaf.validFrom).toISOString(),
    not_after: new Date(leaf.validTo).toISOString(),
    names: leafNames(leaf),
  };
}

/** The checked parts of an upload: leaf-first chain in PEM, the key in PKCS#8 PEM, and what it shows. */
export interface CheckedUpload {
  /** the chain, parsed (leaf first) */
  certs: X509Certificate[];
  chain: string;
  key: string;
  info: CertInfo;
}

/**
 * Checks an uploaded certificate: the chain parses, the key is the leaf's,
 * the leaf is valid now, and its names cover `cn`. Errors name the problem
 * and never quote the key.
 */
export function checkUpload(p: { chain: string; pkey: string; cn: string }, now: number): CheckedUpload {
  const certs = parseChain(p.chain);
  const leaf = certs[0]!;
  const key = parseKey(p.pkey);
  if (!leaf.checkPrivateKey(key))
    throw err('UH_INVALID', "'pkey' is not the private key of the first certificate in 'chain'");
  const info = certInfo(leaf);
  if (Date.parse(info.not_after) <= now) throw err('UH_INVALID', `the certificate expired at ${info.not_after}`);
  if (Date.parse(info.not_before) > now)
    throw err('UH_INVALID', `the certificate is not valid before ${info.not_before}`);
  for (let i = 1; i < certs.length; i++) {
    if (!certs[i - 1]!.checkIssued(certs[i]!)) {
      throw err(
        'UH_INVALID',
        `'chain': certificate ${i + 1} did not issue certificate ${i} (order the chain leaf first)`,
      );
    }
  }
  const cn = normalizeName(p.cn);
  if (!info.names.some((n) => nameCovers(n, cn))) {
    throw err('UH_CERT_MISMATCH', `the certificate is for ${info.names.join(', ') || 'no DNS name'}, not '${cn}'`);
  }
  return {
    certs,
    chain: certs.map((c) => c.toString()).join(''),
    key: key.export({ format: 'pem', type: 'pkcs8' }) as string,
    info,
  };
}
