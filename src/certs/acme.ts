import * as acme from 'acme-client';
import https from 'node:https';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { KeyPair } from '../gateway/types.js';
import type { ChallengeAnswers } from './challenges.js';

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
 * `acme-client`, answering HTTP-01 through `challenges` (the data plane
 * serves them on port 80). Knows nothing of the gateway or the store.
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

  private async getClient(): Promise<acme.Client> {
    this.client ??= new acme.Client({
      directoryUrl: this.o.directoryUrl,
      accountKey: await this.accountKey(),
      backoffAttempts: 5,
    });
    return this.client;
  }

  /** A new key and certificate chain (leaf first) for `fqdn`; throws the authority's problem. */
  async issue(fqdn: string): Promise<KeyPair> {
    const client = await this.getClient();
    const [key, csr] = await acme.crypto.createCsr(
      { commonName: fqdn, altNames: [fqdn] },
      await acme.crypto.createPrivateEcdsaKey('P-256'),
    );
    const cert = await client.auto({
      csr,
      email: this.o.email,
      termsOfServiceAgreed: true,
      challengePriority: ['http-01'],
      // the authority checks; a local self-check would need the public DNS
      skipChallengeVerification: true,
      challengeCreateFn: async (authz, ch, keyAuthorization) => {
        if (ch.type !== 'http-01') throw new Error(`unsupported challenge ${ch.type}`);
        this.o.challenges.add(authz.identifier.value, ch.token, keyAuthorization);
      },
      challengeRemoveFn: async (authz, ch) => {
        this.o.challenges.remove(authz.identifier.value, ch.token);
      },
    });
    return { cert, key: key.toString() };
  }
}
