import * as acme from 'acme-client';
import https from 'node:https';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { KeyPair } from '../gateway/types.js';
import type { ChallengeAnswers, ChallengeType } from './challenges.js';

export interface AcmeIssuerOptions {
  directoryUrl: string;
  /** directory for the account key (0700; key 0600) */
  dir: string;
  /** extra CAs (PEM) trusted for the directory's HTTPS */
  directoryCa?: string;
  email?: string;
  challenges: ChallengeAnswers;
}

/**
 * Orders one certificate per domain from an ACME authority with
 * `acme-client`, answering the chosen challenge through `challenges`: HTTP-01
 * (the data plane serves it on port 80) or TLS-ALPN-01 (the data plane
 * presents a challenge certificate on the TLS ports). Knows nothing of the
 * gateway or the store.
 */
export class AcmeIssuer {
  private client: acme.Client | undefined;

  constructor(private readonly o: AcmeIssuerOptions) {
    if (o.directoryCa) {
      // acme-client talks through its own axios instance; a private authority's CA is trusted there only.
      acme.axios.defaults.httpsAgent = new https.Agent({ ca: o.directoryCa, keepAlive: false });
    }
  }

  private async accountKey(): Promise<Buffer> {
    const p = join(this.o.dir, 'account-key.pem');
    try {
      return await readFile(p);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    await mkdir(this.o.dir, { recursive: true, mode: 0o700 });
    const key = await acme.crypto.createPrivateEcdsaKey('P-256');
    await writeFile(`${p}.tmp`, key, { mode: 0o600 });
    await rename(`${p}.tmp`, p);
    return key;
  }

  /**
   * The client, with its account found or registered. A daemon that starts
   * again has the key of an account the authority knows: acme-client's own
   * registration would then send an update holding only the terms of
   * service, which authorities refuse as an empty update (pebble: "Use
   * POST-as-GET to retrieve account data"), failing the first order after
   * every restart. So the account is looked up first (`onlyReturnExisting`,
   * a POST-as-GET) and registered only when there is none.
   */
  private async getClient(): Promise<acme.Client> {
    if (this.client) return this.client;
    const client = new acme.Client({
      directoryUrl: this.o.directoryUrl,
      accountKey: await this.accountKey(),
      backoffAttempts: 5,
    });
    try {
      await client.createAccount({ onlyReturnExisting: true });
    } catch {
      // none for this key (or the lookup failed: the registration says why)
      await client.createAccount({
        termsOfServiceAgreed: true,
        ...(this.o.email ? { contact: [`mailto:${this.o.email}`] } : {}),
      });
    }
    this.client = client;
    return client;
  }

  /** A new key and certificate chain (leaf first) for `fqdn`; throws the authority's problem. */
  async issue(fqdn: string, method: ChallengeType): Promise<KeyPair> {
    const client = await this.getClient();
    const [key, csr] = await acme.crypto.createCsr(
      { commonName: fqdn, altNames: [fqdn] },
      await acme.crypto.createPrivateEcdsaKey('P-256'),
    );
    const cert = await client.auto({
      csr,
      email: this.o.email,
      termsOfServiceAgreed: true,
      // only the one challenge the data plane can answer for this domain
      challengePriority: [method],
      // the authority checks; a local self-check would need the public DNS
      skipChallengeVerification: true,
      challengeCreateFn: async (authz, ch, keyAuthorization) => {
        const host = authz.identifier.value;
        const type: string = ch.type; // acme-client's types leave out tls-alpn-01
        if (type !== method) throw new Error(`the authority offers no ${method} challenge for ${host}`);
        if (type === 'http-01') return this.o.challenges.add(host, ch.token, keyAuthorization);
        const [alpnKey, alpnCert] = await acme.crypto.createAlpnCertificate(authz, keyAuthorization);
        await this.o.challenges.addAlpn(host, { cert: alpnCert.toString(), key: alpnKey.toString() });
      },
      challengeRemoveFn: async (authz, ch) => {
        if ((ch.type as string) === 'tls-alpn-01') this.o.challenges.removeAlpn(authz.identifier.value);
        else this.o.challenges.remove(authz.identifier.value, ch.token);
      },
    });
    return { cert, key: key.toString() };
  }
}
