// @peculiar/x509 resolves its parts through tsyringe, which needs the Reflect metadata polyfill loaded first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { webcrypto } from 'node:crypto';

/** Test certificates: a CA and leaves it signs, made with @peculiar/x509. */

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const RSA = {
  name: 'RSASSA-PKCS1-v1_5',
  modulusLength: 2048,
  publicExponent: new Uint8Array([1, 0, 1]),
  hash: 'SHA-256',
} as const;
const DAY = 86_400_000;
x509.cryptoProvider.set(webcrypto as unknown as Crypto);

export interface TestCa {
  cert: x509.X509Certificate;
  keys: CryptoKeyPair;
  pem: string;
}

const keyPem = async (k: CryptoKey): Promise<string> =>
  x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', k), 'PRIVATE KEY');

export async function testCa(name = 'CN=unihost test CA'): Promise<TestCa> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name,
    notBefore: new Date(Date.now() - DAY),
    notAfter: new Date(Date.now() + 30 * DAY),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true),
    ],
  });
  return { cert, keys, pem: cert.toString('pem') };
}

/**
 * A positive 8-byte serial with no leading zero byte: DER drops a leading 00 and Node prints the
 * rest, so a random first byte of 0 (1 in 256) made a served serial differ from the one generated.
 */
function randomSerial(): string {
  const b = webcrypto.getRandomValues(new Uint8Array(8));
  b[0] = 0x10 + (b[0]! % 0x70);
  return Buffer.from(b).toString('hex');
}

/** A leaf for `names` (first is the CN) signed by `ca`; `from`/`to` in days relative to now. */
export async function testLeaf(
  ca: TestCa,
  names: string[],
  o: { from?: number; to?: number; serial?: string; rsa?: boolean } = {},
): Promise<{ cert: string; key: string; serial: string }> {
  const keys = (await webcrypto.subtle.generateKey(o.rsa ? RSA : ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const serial = o.serial ?? randomSerial();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial,
    subject: `CN=${names[0]}`,
    issuer: ca.cert.subject,
    notBefore: new Date(Date.now() + (o.from ?? -1) * DAY),
    notAfter: new Date(Date.now() + (o.to ?? 10) * DAY),
    publicKey: keys.publicKey,
    signingKey: ca.keys.privateKey,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names.map((value) => ({ type: 'dns' as const, value }))),
    ],
  });
  return { cert: cert.toString('pem'), key: await keyPem(keys.privateKey), serial };
}
