import { randomUUID } from 'node:crypto';
import type { Target } from '../domain/refs.js';
import { ChallengeAnswers } from '../certs/challenges.js';
import { TrustAnchors } from '../certs/trust.js';
import { CertFiles } from '../certs/files.js';
import { checkUpload, nameCovers, normalizeName } from '../certs/pem.js';
import { checkName, randomSuffix } from '../domain/names.js';
import { refTarget } from '../domain/refs.js';
import { err } from '../errors.js';
import type { CertificateRec, Tx, UserRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { findCertificate } from './lookup.js';
import { assertQuota } from './users.js';

export { findCertificate };

/** Whether a certificate covers `fqdn`: its issued names, else (nothing issued yet) its common name. */
export function certCovers(c: Pick<CertificateRec, 'common_name' | 'names'>, fqdn: string): boolean {
  return (c.names.length > 0 ? c.names : [c.common_name]).some((n) => nameCovers(n, fqdn));
}

export interface UploadIn {
  name?: string;
  cn?: string;
  common_name?: string;
  chain: string;
  pkey: string;
}

/** Certificates for custom domains. Issuance from an ACME authority is the certificate controller's job. */
export class CertificateService {
  readonly files: CertFiles;
  /** HTTP-01 answers the data plane gives while orders are validated */
  readonly challenges = new ChallengeAnswers();

  /** the roots an uploaded chain must reach to claim its name */
  private readonly trust: TrustAnchors;

  constructor(private readonly deps: ServiceBase) {
    this.files = new CertFiles(deps.paths.certs);
    this.trust = new TrustAnchors(deps.config.acme.uploadTrustedCa);
  }

  private now(): string {
    return new Date(this.deps.clock.now()).toISOString();
  }

  /**
   * Refuses a custom FQDN that another account has claimed: a live
   * certificate of theirs names it exactly (a domain row is checked by the
   * caller) and proves control of it: one from the ACME authority (which
   * checks control before it issues; a pending one claims until it fails),
   * or an upload whose chain reaches a trusted root. A self-signed upload,
   * or one of an unknown CA, claims nothing.
   */
  async checkClaimInTx(tx: Tx, user: UserRec, fqdn: string): Promise<void> {
    const other = (await tx.certificates.named(fqdn)).find(
      (c) => c.user_id !== user.id && c.state !== 'error' && (c.source === 'acme' || c.proven),
    );
    if (other && !this.deps.proofs.has(user.id, fqdn))
      throw err(
        'UH_DOMAIN_TAKEN',
        `domain '${fqdn}' is claimed by another account` + this.deps.proofs.howToProve(user.id, fqdn),
      );
  }

  /**
   * The certificate a custom domain uses: the one named in the request (it
   * must cover the domain), else a valid one whose names cover it, else a
   * pending one for the same name, else a new `pending` one that the
   * certificate controller requests.
   */
  async forDomainInTx(
    tx: Tx,
    user: UserRec,
    fqdn: string,
    ref?: { uuid?: string; name?: string },
  ): Promise<CertificateRec> {
    await this.checkClaimInTx(tx, user, fqdn);
    if (ref) {
      const c = await findCertificate(tx, user, refTarget(ref, 'certificate'));
      if (!certCovers(c, fqdn)) {
        throw err(
          'UH_CERT_MISMATCH',
          `certificate '${c.name}' (${(c.names.length > 0 ? c.names : [c.common_name]).join(', ')}) does not cover domain '${fqdn}'`,
        );
      }
      return c;
    }
    const mine = await tx.certificates.list(user.id);
    const existing =
      mine.find((c) => c.state === 'valid' && certCovers(c, fqdn)) ??
      mine.find((c) => c.state === 'pending' && c.common_name === fqdn);
    if (existing) return existing;
    let name = fqdn.slice(0, 121);
    if (!checkName(name).ok || (await tx.certificates.getByName(user.id, name))) name = `cert-${randomSuffix(8)}`;
    const rec: CertificateRec = {
      id: randomUUID(),
      user_id: user.id,
      name,
      created_at: this.now(),
      common_name: fqdn,
      state: 'pending',
      validation_attempt: 0,
      validation_next: this.now(),
      subject: `CN=${fqdn}`,
      issuer: null,
      serial_number: null,
      not_before: null,
      not_after: null,
      message: null,
      source: 'acme',
      names: [],
      proven: false,
    };
    await assertQuota(tx, this.deps.config, user, { certificates: 1 });
    await tx.certificates.insert(rec);
    return rec;
  }

  /**
   * Stores an uploaded certificate (checked by checkUpload): the pair goes
   * to files first and is removed again if the record cannot be created.
   */
  async create(user: UserRec, p: UploadIn) {
    const cnIn = p.cn ?? p.common_name;
    if (cnIn === undefined) throw err('UH_INVALID', "'cn' (or 'common_name') is required");
    if (p.cn !== undefined && p.common_name !== undefined && normalizeName(p.cn) !== normalizeName(p.common_name)) {
      throw err('UH_INVALID', "'cn' and 'common_name' disagree: give one");
    }
    const cn = normalizeName(cnIn);
    const up = checkUpload({ chain: p.chain, pkey: p.pkey, cn }, this.deps.clock.now());
    const name = p.name ?? `cert-${randomSuffix(8)}`;
    await this.deps.proofs.prepare(user.id, [`${cn}.`]);
    const id = randomUUID();
    await this.files.write(id, { cert: up.chain, key: up.key });
    try {
      return await this.deps.store.tx(async (tx) => {
        if (await tx.certificates.getByName(user.id, name)) {
          throw err('UH_EXISTS', `a certificate named '${name}' already exists`);
        }
        await this.checkClaimInTx(tx, user, cn);
        await assertQuota(tx, this.deps.config, user, { certificates: 1 });
        const { names, ...shown } = up.info;
        await tx.certificates.insert({
          id,
          user_id: user.id,
          name,
          created_at: this.now(),
          common_name: cn,
          state: 'valid',
          validation_attempt: 0,
          validation_next: null,
          message: null,
          source: 'upload',
          names,
          proven: this.trust.proves(up.certs, this.deps.clock.now()),
          ...shown,
        });
        return { uuid: id, name, common_name: cn, state: 'valid', ...shown };
      });
    } catch (e) {
      await this.files.remove(id);
      throw e;
    }
  }

  /**
   * `PUT /v1/certificates`: a new chain and key for a certificate, covering
   * its common name and every domain that uses it. The gateway serves the
   * new pair from its next handshake (HAProxy's Runtime API: open
   * connections keep theirs). An ACME certificate replaced so becomes an
   * uploaded one: the platform no longer renews it.
   */
  async replace(user: UserRec, t: Target, p: { chain: string; pkey: string }) {
    const c = await this.deps.store.read((tx) => findCertificate(tx, user, t));
    const up = checkUpload({ chain: p.chain, pkey: p.pkey, cn: c.common_name }, this.deps.clock.now());
    const old = await this.files.read(c.id);
    await this.files.write(c.id, { cert: up.chain, key: up.key });
    try {
      return await this.deps.store.tx(async (tx) => {
        const cur = await findCertificate(tx, user, { uuid: c.id });
        for (const d of await tx.domains.forCertificate(cur.id))
          if (!up.info.names.some((n) => nameCovers(n, d.fqdn)))
            throw err('UH_CERT_MISMATCH', `the new certificate does not cover '${d.fqdn}', which uses it`);
        const { names, ...shown } = up.info;
        await tx.certificates.update(cur.id, {
          state: 'valid',
          source: 'upload',
          names,
          proven: this.trust.proves(up.certs, this.deps.clock.now()),
          message: null,
          validation_attempt: 0,
          validation_next: null,
          ...shown,
        });
        const was = cur.source === 'acme' ? ' (it was an ACME certificate: the platform no longer renews it)' : '';
        return { uuid: cur.id, name: cur.name, state: 'valid', ...shown, message: `certificate replaced${was}` };
      });
    } catch (e) {
      // the record did not change: the old pair goes back
      if (old) await this.files.write(c.id, old);
      else await this.files.remove(c.id);
      throw e;
    }
  }

  async get(user: UserRec, t: Target) {
    return this.deps.store.read(async (tx) => {
      const c = await findCertificate(tx, user, t);
      const groups = new Map<string, string>();
      for (const d of await tx.domains.forCertificate(c.id)) {
        const g = await tx.groups.get(user.id, d.group_id);
        if (g) groups.set(g.id, g.name);
      }
      const out: Record<string, unknown> = {
        uuid: c.id,
        name: c.name,
        created_at: c.created_at,
        common_name: c.common_name,
        state: c.state,
      };
      if (c.state === 'pending')
        out.validation = { attempt: c.validation_attempt, ...(c.validation_next ? { next: c.validation_next } : {}) };
      for (const k of ['subject', 'issuer', 'serial_number', 'not_before', 'not_after'] as const)
        if (c[k] !== null) out[k] = c[k];
      if (c.state === 'error' && c.message) out.message = c.message;
      out.service_groups = [...groups].map(([uuid, name]) => ({ uuid, name }));
      return out;
    });
  }

  async delete(user: UserRec, t: Target) {
    const out = await this.deps.store.tx(async (tx) => {
      const c = await findCertificate(tx, user, t);
      const used = await tx.domains.forCertificate(c.id);
      if (used.length > 0) {
        throw err(
          'UH_ATTACHED',
          `certificate '${c.name}' is still used by domain(s) ${used.map((d) => `'${d.fqdn}'`).join(', ')}`,
        );
      }
      await tx.certificates.delete(c.id);
      return { uuid: c.id, name: c.name };
    });
    await this.files.remove(out.uuid);
    return out;
  }

  async list(user: UserRec, commonName?: string) {
    return this.deps.store.read(async (tx) =>
      (
        await tx.certificates.list(
          user.id,
          commonName === undefined ? {} : { common_name: commonName.replace(/\.$/, '').toLowerCase() },
        )
      ).map((c) => ({ uuid: c.id, name: c.name })),
    );
  }
}
