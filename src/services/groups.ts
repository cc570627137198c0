import { randomUUID } from 'node:crypto';
import type { Target } from '../domain/refs.js';
import { randomSuffix, serviceGroupDefaultName } from '../domain/names.js';
import { parseDomain, type DomainIn } from '../domain/domains.js';
import { checkGroupLimits } from '../domain/group-limits.js';
import { checkServices, portPolicy, type PortPolicy, type ServiceIn } from '../domain/ports.js';
import { refTarget } from '../domain/refs.js';
import { err } from '../errors.js';
import type { ServiceEntry, ServiceGroupRec, Tx, UserRec } from '../store/types.js';
import type { CertificateService } from './certificates.js';
import type { ServiceBase } from './deps.js';
import { assertQuota } from './users.js';
import { findGroup } from './lookup.js';
import { PROOF_LABEL } from './domain-proofs.js';
import { updateGroup } from './group-updates.js';
import type { UpdateIn } from '../domain/updates.js';

export interface GroupDescription {
  name?: string;
  services?: ServiceIn[];
  domains?: DomainIn[];
  /** requests (HTTP) or connections (TCP) per instance beyond which new ones queue */
  soft_limit?: number;
  /** ... in service and queued, beyond which new ones are refused */
  hard_limit?: number;
}

export { findGroup };

/**
 * Checks what a group description says on its own (ports, domain syntax,
 * `certificate` only for custom FQDNs, no domain twice), so that routes can
 * refuse an invalid request with a 400 before any entry runs. `seen` holds
 * the domains of earlier entries of the same request. Returns the services
 * with defaults filled in.
 */
export function checkGroupDescription(
  d: GroupDescription,
  metro: string,
  seen = new Set<string>(),
  policy?: PortPolicy,
): ServiceEntry[] {
  const services = checkServices(d.services ?? [], policy);
  checkGroupLimits(d.soft_limit ?? null, d.hard_limit ?? null, 'service group');
  for (const dom of d.domains ?? []) {
    const { fqdn, custom } = parseDomain(dom.name, metro);
    if (seen.has(fqdn)) throw err('UH_INVALID', `domain '${fqdn}' is given twice`);
    seen.add(fqdn);
    if (dom.certificate) refTarget(dom.certificate, `domain '${dom.name}': certificate`);
    if (dom.certificate && !custom) {
      throw err(
        'UH_INVALID',
        `domain '${dom.name}': 'certificate' is only allowed for FQDNs (names ending with a dot) outside the metro domain`,
      );
    }
  }
  return services;
}

/** The generated domain label `<name>-<8 random>` (domain rule 1), kept a valid 63-character label. */
function generatedLabel(groupName: string): string {
  const base = groupName.split('.')[0]!.slice(0, 54).replace(/-+$/, '');
  return `${base}-${randomSuffix(8)}`;
}

/** Service groups: published ports, domains and persistence. */
export class GroupService {
  constructor(private readonly deps: ServiceBase & { certificates: CertificateService }) {}

  /** Refuses reserved labels under the metro domain (e.g. `www`), and the metro domain itself. */
  private checkReserved(fqdn: string): void {
    const metro = this.deps.config.metroDomain;
    if (fqdn !== metro && !fqdn.endsWith(`.${metro}`)) return;
    const label = fqdn === metro ? '' : fqdn.slice(0, -(metro.length + 1));
    if (label === '' || this.deps.config.reservedLabels.includes(label.split('.').pop()!)) {
      throw err('UH_DOMAIN_TAKEN', `domain '${fqdn}' is reserved`);
    }
  }

  async resolveInTx(tx: Tx, user: UserRec, t: Target): Promise<ServiceGroupRec> {
    return findGroup(tx, user, t);
  }

  /** Creates a group inside `tx`: quotas, name and domain uniqueness, port rules, certificates. */
  async createInTx(tx: Tx, user: UserRec, d: GroupDescription, persistent: boolean): Promise<ServiceGroupRec> {
    const services = checkGroupDescription(d, this.deps.config.metroDomain, undefined, portPolicy(this.deps.config));
    await assertQuota(tx, this.deps.config, user, { service_groups: 1, services: services.length });
    const name = d.name ?? serviceGroupDefaultName();
    if (await tx.groups.getByName(user.id, name))
      throw err('UH_EXISTS', `a service group named '${name}' already exists`);
    const g: ServiceGroupRec = {
      id: randomUUID(),
      user_id: user.id,
      name,
      created_at: new Date(this.deps.clock.now()).toISOString(),
      persistent,
      services,
      soft_limit: d.soft_limit ?? null,
      hard_limit: d.hard_limit ?? null,
    };
    await tx.groups.insert(g);
    const domains = d.domains ?? (services.length > 0 ? [{ name: generatedLabel(name) }] : []);
    for (const dom of domains) await this.addDomainInTx(tx, user, g, dom);
    return g;
  }

  /**
   * Claims one domain for `g`: not reserved, not used by anyone; custom FQDNs
   * get a certificate. A custom FQDN another account's group has moves to
   * `g` when this account proved control of it in DNS (domain-proofs.ts).
   */
  async addDomainInTx(tx: Tx, user: UserRec, g: ServiceGroupRec, dom: DomainIn): Promise<void> {
    const { fqdn, custom } = parseDomain(dom.name, this.deps.config.metroDomain);
    this.checkReserved(fqdn);
    const held = await tx.domains.get(fqdn);
    if (held) {
      if (held.user_id === user.id) throw err('UH_DOMAIN_TAKEN', `domain '${fqdn}' is already in use`);
      if (!custom || !this.deps.proofs.has(user.id, fqdn))
        throw err(
          'UH_DOMAIN_TAKEN',
          `domain '${fqdn}' is already in use` + (custom ? this.deps.proofs.howToProve(user.id, fqdn) : ''),
        );
      await this.takeOverInTx(tx, held.group_id, fqdn);
    }
    await assertQuota(tx, this.deps.config, user, { domains: 1 });
    const cert = custom ? await this.deps.certificates.forDomainInTx(tx, user, fqdn, dom.certificate) : null;
    await tx.domains.insert({ fqdn, group_id: g.id, user_id: user.id, certificate_id: cert?.id ?? null });
  }

  /** Takes `fqdn` from the group that had it; its instances get a notice saying why. */
  private async takeOverInTx(tx: Tx, groupId: string, fqdn: string): Promise<void> {
    await tx.domains.delete(fqdn);
    for (const i of await tx.instances.inGroup(groupId))
      tx.events.notice(
        i,
        `domain '${fqdn}' left this service group: another account proved control of it in DNS (${PROOF_LABEL}.${fqdn} TXT)`,
      );
  }

  /** `{uuid, name, domains}` as shown in instances and create responses. */
  async summary(tx: Tx, g: ServiceGroupRec): Promise<Record<string, unknown>> {
    return { uuid: g.id, name: g.name, domains: await this.domainsView(tx, g.id) };
  }

  private async domainsView(tx: Tx, groupId: string): Promise<Record<string, unknown>[]> {
    const out: Record<string, unknown>[] = [];
    for (const d of await tx.domains.forGroup(groupId)) {
      const e: Record<string, unknown> = { fqdn: d.fqdn };
      if (d.certificate_id) {
        const c = await tx.certificates.get(d.user_id, d.certificate_id);
        if (c) e.certificate = { uuid: c.id, name: c.name, state: c.state };
      }
      out.push(e);
    }
    return out;
  }

  async create(user: UserRec, d: GroupDescription) {
    await this.deps.proofs.prepare(
      user.id,
      (d.domains ?? []).map((x) => x.name),
    );
    return this.deps.store.tx(async (tx) => this.summary(tx, await this.createInTx(tx, user, d, true)));
  }

  async get(user: UserRec, t: Target) {
    const view = await this.deps.store.read(async (tx) => {
      const g = await findGroup(tx, user, t);
      const as = await tx.autoscale.get(g.id);
      return {
        uuid: g.id,
        name: g.name,
        created_at: g.created_at,
        persistent: g.persistent,
        autoscale: as?.enabled ?? false,
        services: g.services,
        ...(g.soft_limit !== null ? { soft_limit: g.soft_limit } : {}),
        ...(g.hard_limit !== null ? { hard_limit: g.hard_limit } : {}),
        domains: await this.domainsView(tx, g.id),
        instances: (await tx.instances.inGroup(g.id)).map((i) => ({ uuid: i.id, name: i.name })),
      };
    });
    // the gateway's counters, where a gateway measures them (docs/gateway.md, "Traffic counters")
    const c = (await this.deps.figures.gateway())?.groups[view.uuid];
    if (!c) return view;
    const traffic = {
      requests: c.requests,
      open_connections: c.openConnections,
      bytes_in: c.bytesIn,
      bytes_out: c.bytesOut,
    };
    return { ...view, traffic };
  }

  /** PATCH: one property (src/services/group-updates.ts). */
  update(user: UserRec, t: Target, u: UpdateIn) {
    return updateGroup({ ...this.deps, groups: this }, user, t, u);
  }

  async delete(user: UserRec, t: Target) {
    return this.deps.store.tx(async (tx) => {
      const g = await findGroup(tx, user, t);
      const n = (await tx.instances.inGroup(g.id)).length;
      if (n > 0) throw err('UH_ATTACHED', `service group '${g.name}' still has ${n} attached instance(s)`);
      await this.removeInTx(tx, g);
      return { uuid: g.id, name: g.name };
    });
  }

  private async removeInTx(tx: Tx, g: ServiceGroupRec): Promise<void> {
    await tx.autoscale.delete(g.id);
    await tx.domains.deleteForGroup(g.id);
    await tx.groups.delete(g.id);
  }

  async list(user: UserRec, f: { persistent?: boolean; fqdn?: string }) {
    return this.deps.store.read(async (tx) => {
      const out: { uuid: string; name: string }[] = [];
      const want = f.fqdn?.replace(/\.$/, '').toLowerCase();
      for (const g of await tx.groups.list(user.id, f.persistent === undefined ? {} : { persistent: f.persistent })) {
        if (want !== undefined && !(await tx.domains.forGroup(g.id)).some((d) => d.fqdn === want)) continue;
        out.push({ uuid: g.id, name: g.name });
      }
      return out;
    });
  }

  /** A second instance attached to an implicit group makes it persistent. */
  async onInstanceAttachedInTx(tx: Tx, user: UserRec, groupId: string): Promise<void> {
    const g = await tx.groups.get(user.id, groupId);
    if (g && !g.persistent && (await tx.instances.inGroup(groupId)).length > 1) {
      await tx.groups.update(groupId, { persistent: true });
    }
  }

  /** An implicit group lives and dies with its instance. */
  async onInstanceRemovedInTx(tx: Tx, user: UserRec, groupId: string): Promise<void> {
    const g = await tx.groups.get(user.id, groupId);
    if (g && !g.persistent && (await tx.instances.inGroup(groupId)).length === 0) await this.removeInTx(tx, g);
  }
}
