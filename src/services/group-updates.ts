import type { Target } from '../domain/refs.js';
import { checkServices, portPolicy, type ServiceIn } from '../domain/ports.js';
import { onlyOps, setInt, unsupported, type UpdateIn } from '../domain/updates.js';
import { err } from '../errors.js';
import { checkGroupLimits, MAX_LIMIT } from '../domain/group-limits.js';
import type { ServiceEntry, ServiceGroupRec, Tx, UserRec } from '../store/types.js';
import type { ServiceBase } from './deps.js';
import { MAX_DOMAINS_PER_GROUP, parseDomain, type DomainIn } from '../domain/domains.js';
import { findGroup } from './lookup.js';
import { assertQuota } from './users.js';

/** The group rule an update applies (GroupService's, named here so this module does not import groups.ts back). */
type Deps = ServiceBase & {
  groups: { addDomainInTx(tx: Tx, user: UserRec, g: ServiceGroupRec, d: DomainIn): Promise<void> };
};

/**
 * `PATCH /v1/services`: one property of one service group. Published ports
 * (`services`) and `domains` change the routes (the gateway applies them
 * within moments; a new public port reloads HAProxy); `soft_limit` and
 * `hard_limit` bound the work each instance gets (docs/gateway.md,
 * "Limits"). The answer says what changed.
 */
export async function updateGroup(deps: Deps, user: UserRec, t: Target, u: UpdateIn): Promise<Record<string, unknown>> {
  if (u.prop === 'domains' && u.op !== 'del') await deps.proofs.prepare(user.id, domainNames(u.value));
  return deps.store.tx(async (tx) => {
    const g = await findGroup(tx, user, t);
    const said = await apply(deps, tx, user, g, u);
    return { uuid: g.id, name: g.name, ...(u.id !== undefined ? { id: u.id } : {}), message: said };
  });
}

async function apply(deps: Deps, tx: Tx, user: UserRec, g: ServiceGroupRec, u: UpdateIn): Promise<string> {
  switch (u.prop) {
    case 'services':
      return updateServices(deps, tx, user, g, u);
    case 'domains':
      return updateDomains(deps, tx, user, g, u);
    case 'soft_limit':
    case 'hard_limit': {
      const value = u.op === 'del' ? null : (onlyOps(u, ['set', 'del']), setInt(u, 1, MAX_LIMIT));
      const next = { soft: g.soft_limit, hard: g.hard_limit, [u.prop === 'soft_limit' ? 'soft' : 'hard']: value };
      checkGroupLimits(next.soft, next.hard, `service group '${g.name}'`);
      await tx.groups.update(g.id, { [u.prop]: value });
      return value === null ? `${u.prop} removed` : `${u.prop} set to ${value} per instance`;
    }
    case 'autokill':
      return unsupported('autokill', 'instances are not killed after a time or a number of requests');
    default:
      throw err('UH_INVALID', `update: unknown property '${u.prop}'`);
  }
}

/** `services`: `set` the published ports, `add` more, `del` some (by port, or entries with their `port`). */
async function updateServices(deps: Deps, tx: Tx, user: UserRec, g: ServiceGroupRec, u: UpdateIn): Promise<string> {
  const list = Array.isArray(u.value) ? u.value : [u.value];
  let next: ServiceEntry[];
  if (u.op === 'del') {
    const ports = new Set(
      list.map((x) => {
        const p = typeof x === 'number' ? x : (x as { port?: unknown } | null)?.port;
        if (typeof p !== 'number')
          throw err('UH_INVALID', "update of 'services': del takes ports, or entries with a port");
        if (!g.services.some((s) => s.port === p))
          throw err('UH_INVALID', `update of 'services': port ${p} is not published`);
        return p;
      }),
    );
    next = g.services.filter((s) => !ports.has(s.port));
  } else {
    if (list.some((x) => !x || typeof x !== 'object'))
      throw err(
        'UH_INVALID',
        "update of 'services': the value is an array of services ({port, destination_port, handlers})",
      );
    const given = list as ServiceIn[];
    next = checkServices(u.op === 'set' ? given : [...g.services, ...given], portPolicy(deps.config));
  }
  const added = next.length - g.services.length;
  if (added > 0) await assertQuota(tx, deps.config, user, { services: added });
  await tx.groups.update(g.id, { services: next });
  return `published ports: ${next.map((s) => s.port).join(', ') || 'none'}`;
}

/** `domains`: `set` the group's names, `add` more, `del` some (by name, as given at creation or as FQDN). */
/** The names in a `domains` update's value, for the proofs looked up before it (bad values are refused in it). */
function domainNames(value: unknown): string[] {
  return (Array.isArray(value) ? value : [value]).flatMap((x: unknown) =>
    typeof x === 'string' ? [x] : x && typeof (x as DomainIn).name === 'string' ? [(x as DomainIn).name] : [],
  );
}

async function updateDomains(deps: Deps, tx: Tx, user: UserRec, g: ServiceGroupRec, u: UpdateIn): Promise<string> {
  const list = (Array.isArray(u.value) ? u.value : [u.value]) as unknown[];
  const asDomain = (x: unknown): DomainIn => {
    if (typeof x === 'string') return { name: x };
    if (x && typeof x === 'object' && typeof (x as DomainIn).name === 'string') return x as DomainIn;
    throw err('UH_INVALID', "update of 'domains': the value is an array of names or {name, certificate} objects");
  };
  const metro = deps.config.metroDomain;
  const have = (await tx.domains.forGroup(g.id)).map((d) => d.fqdn);
  const wanted = list.map(asDomain);
  if (u.op === 'del' || u.op === 'set') {
    const keep = new Set(u.op === 'set' ? wanted.map((d) => parseDomain(d.name, metro).fqdn) : []);
    const drop =
      u.op === 'del'
        ? new Set(wanted.map((d) => parseDomain(d.name, metro).fqdn))
        : new Set(have.filter((f) => !keep.has(f)));
    for (const f of drop) {
      if (!have.includes(f)) throw err('UH_INVALID', `update of 'domains': '${f}' is not a domain of this group`);
      await tx.domains.delete(f);
    }
  }
  if (u.op !== 'del') {
    const now = new Set((await tx.domains.forGroup(g.id)).map((d) => d.fqdn));
    for (const d of wanted)
      if (!now.has(parseDomain(d.name, metro).fqdn)) await deps.groups.addDomainInTx(tx, user, g, d);
  }
  const left = (await tx.domains.forGroup(g.id)).map((d) => d.fqdn);
  if (left.length > MAX_DOMAINS_PER_GROUP)
    throw err(
      'UH_INVALID',
      `update of 'domains': a group has at most ${MAX_DOMAINS_PER_GROUP} domains, not ${left.length}`,
    );
  return `domains: ${left.join(', ') || 'none'}`;
}
