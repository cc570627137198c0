import { randomUUID } from 'node:crypto';
import type { Target } from '../api/endpoint.js';
import { checkName, randomSuffix } from '../domain/names.js';
import { refTarget } from '../domain/refs.js';
import { err } from '../errors.js';
import type { CertificateRec, Tx, UserRec } from '../store/types.js';
import type { Deps } from './index.js';

export async function findCertificate(tx: Tx, user: UserRec, t: Target): Promise<CertificateRec> {
  const c =
    t.uuid !== undefined
      ? await tx.certificates.get(user.id, t.uuid)
      : await tx.certificates.getByName(user.id, t.name);
  if (!c) {
    throw err(
      'UH_NOT_FOUND',
      t.uuid !== undefined ? `No certificate with UUID '${t.uuid}'` : `No certificate with name '${t.name}'`,
    );
  }
  return c;
}

/** Whether a certificate's common name covers `fqdn` (exact, or one-label wildcard). */
export function covers(commonName: string, fqdn: string): boolean {
  if (commonName === fqdn) return true;
  if (!commonName.startsWith('*.')) return false;
  const rest = fqdn.slice(fqdn.indexOf('.') + 1);
  return fqdn.includes('.') && rest === commonName.slice(2);
}

/** Certificates for custom domains. Issuance from an ACME authority is the certs reconciler's job. */
export class CertificateService {
  constructor(private readonly deps: Deps) {}

  /**
   * The certificate a custom domain uses: the one named in the request (its
   * common name must cover the domain), else an existing one that covers it,
   * else a new `pending` one that the certs reconciler requests.
   */
  async forDomainInTx(
    tx: Tx,
    user: UserRec,
    fqdn: string,
    ref?: { uuid?: string; name?: string },
  ): Promise<CertificateRec> {
    if (ref) {
      const c = await findCertificate(tx, user, refTarget(ref, 'certificate'));
      if (!covers(c.common_name, fqdn)) {
        throw err(
          'UH_CERT_MISMATCH',
          `certificate '${c.name}' (common name '${c.common_name}') does not cover domain '${fqdn}'`,
        );
      }
      return c;
    }
    const existing = (await tx.certificates.list(user.id)).find(
      (c) => c.state !== 'error' && covers(c.common_name, fqdn),
    );
    if (existing) return existing;
    let name = fqdn.slice(0, 121);
    if (!checkName(name).ok || (await tx.certificates.getByName(user.id, name))) name = `cert-${randomSuffix(8)}`;
    const rec: CertificateRec = {
      id: randomUUID(),
      user_id: user.id,
      name,
      created_at: new Date(this.deps.clock.now()).toISOString(),
      common_name: fqdn,
      state: 'pending',
      validation_attempt: 0,
      validation_next: new Date(this.deps.clock.now()).toISOString(),
      subject: `CN=${fqdn}`,
      issuer: null,
      serial_number: null,
      not_before: null,
      not_after: null,
      message: null,
    };
    await tx.certificates.insert(rec);
    return rec;
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
    return this.deps.store.tx(async (tx) => {
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
