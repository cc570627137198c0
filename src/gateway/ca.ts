// @peculiar/x509 resolves its parts through tsyringe, which needs the Reflect metadata polyfill loaded first.
import 'reflect-metadata';
import { AsnConvert } from '@peculiar/asn1-schema';
import {
  GeneralName,
  GeneralSubtree,
  GeneralSubtrees,
  NameConstraints,
  id_ce_nameConstraints,
} from '@peculiar/asn1-x509';
import * as x509 from '@peculiar/x509';
import { webcrypto } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { KeyPair } from './types.js';

/**
 * The local certificate authority used when the operator gives no wildcard
 * certificate: created at first start in the data directory, it signs the
 * `*.<metro domain>` certificate the gateway serves. Users trust `ca.pem`
 * (printed by `unihost`). The CA carries a name constraint for the metro
 * domain, so trusting it cannot let it vouch for any other site.
 */

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY = 86_400_000;
const CA_DAYS = 3650;
/** Renew the wildcard certificate when it has less than this left. */
const RENEW_BEFORE_DAYS = 30;

export interface LocalCa extends KeyPair {
  /** path of the CA certificate users add to their trust store */
  caPath: string;
  caCert: string;
  certPath: string;
  keyPath: string;
  notAfter: Date;
}

const files = (dir: string) => ({
  ca: path.join(dir, 'ca.pem'),
  caKey: path.join(dir, 'ca-key.pem'),
  cert: path.join(dir, 'wildcard.pem'),
  key: path.join(dir, 'wildcard-key.pem'),
});

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

/**
 * Loads the CA and wildcard certificate from `dir`, creating or renewing
 * what is missing, expiring, or made for another metro domain. Safe to call
 * at every start (and daily for renewal).
 */
export async function ensureLocalCa(dir: string, metroDomain: string, now = new Date()): Promise<LocalCa> {
  const f = files(dir);
  const metro = metroDomain.toLowerCase();
  await mkdir(dir, { recursive: true, mode: 0o700 });
  let ca = await loadCa(f.ca, f.caKey, metro, now);
  if (!ca) {
    ca = await createCa(metro, now);
    await writeAtomic(f.caKey, ca.keyPem, 0o600);
    await writeAtomic(f.ca, ca.cert.toString('pem'), 0o644);
  }
  let leaf = await loadLeaf(f.cert, f.key, ca.cert, metro, now);
  if (!leaf) {
    leaf = await createLeaf(ca, metro, now);
    await writeAtomic(f.key, leaf.key, 0o600);
    await writeAtomic(f.cert, leaf.cert, 0o644);
  }
  return {
    caPath: f.ca,
    caCert: ca.cert.toString('pem'),
    certPath: f.cert,
    keyPath: f.key,
    cert: leaf.cert,
    key: leaf.key,
    notAfter: leaf.notAfter,
  };
}

interface Ca {
  cert: x509.X509Certificate;
  key: CryptoKey;
  keyPem: string;
}

async function readOptional(p: string): Promise<string | undefined> {
  try {
    return await readFile(p, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

async function writeAtomic(p: string, text: string, mode: number): Promise<void> {
  const tmp = `${p}.tmp-${process.pid}`;
  await writeFile(tmp, text, { mode });
  await rename(tmp, p);
}

const caName = (metro: string) => `CN=unihost local CA for ${metro}, O=unihost`;

async function loadCa(certPath: string, keyPath: string, metro: string, now: Date): Promise<Ca | undefined> {
  const [certPem, keyPem] = await Promise.all([readOptional(certPath), readOptional(keyPath)]);
  if (!certPem || !keyPem) return undefined;
  const cert = new x509.X509Certificate(certPem);
  // A CA for another metro domain, or one about to expire, is replaced (users must trust the new one).
  if (cert.subject !== caName(metro) || cert.notAfter.getTime() - now.getTime() < RENEW_BEFORE_DAYS * DAY)
    return undefined;
  const der = x509.PemConverter.decodeFirst(keyPem);
  const key = await webcrypto.subtle.importKey('pkcs8', der, ALG, true, ['sign']);
  return { cert, key: key as CryptoKey, keyPem };
}

function pem(der: ArrayBuffer, label: string): string {
  return x509.PemConverter.encode(der, label);
}

/** The name constraint: the CA may only certify names in the metro domain (RFC 5280 4.2.1.10). */
function nameConstraint(metro: string): x509.Extension {
  const nc = new NameConstraints({
    permittedSubtrees: new GeneralSubtrees([new GeneralSubtree({ base: new GeneralName({ dNSName: metro }) })]),
  });
  return new x509.Extension(id_ce_nameConstraints, true, AsnConvert.serialize(nc));
}

async function createCa(metro: string, now: Date): Promise<Ca> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: caName(metro),
    notBefore: new Date(now.getTime() - DAY),
    notAfter: new Date(now.getTime() + CA_DAYS * DAY),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      nameConstraint(metro),
    ],
  });
  const keyPem = pem(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY');
  return { cert, key: keys.privateKey, keyPem };
}

async function loadLeaf(
  certPath: string,
  keyPath: string,
  ca: x509.X509Certificate,
  metro: string,
  now: Date,
): Promise<(KeyPair & { notAfter: Date }) | undefined> {
  const [cert, key] = await Promise.all([readOptional(certPath), readOptional(keyPath)]);
  if (!cert || !key) return undefined;
  const leaf = new x509.X509Certificate(cert);
  const san = leaf.getExtension(x509.SubjectAlternativeNameExtension);
  const names = san?.names.items.map((n) => n.value) ?? [];
  const fresh = leaf.notAfter.getTime() - now.getTime() >= RENEW_BEFORE_DAYS * DAY;
  const ours = names.includes(`*.${metro}`) && (await leaf.verify({ publicKey: ca.publicKey, signatureOnly: true }));
  return fresh && ours ? { cert, key, notAfter: leaf.notAfter } : undefined;
}

async function createLeaf(ca: Ca, metro: string, now: Date, days = 365): Promise<KeyPair & { notAfter: Date }> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const notAfter = new Date(now.getTime() + days * DAY);
  const cert = await x509.X509CertificateGenerator.create({
    subject: `CN=*.${metro}`,
    issuer: ca.cert.subject,
    notBefore: new Date(now.getTime() - DAY),
    notAfter,
    publicKey: keys.publicKey,
    signingKey: ca.key,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([
        { type: 'dns', value: `*.${metro}` },
        { type: 'dns', value: metro },
      ]),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  const key = pem(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY');
  return { cert: cert.toString('pem'), key, notAfter };
}
