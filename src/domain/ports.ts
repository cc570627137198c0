import { err } from '../errors.js';
import type { ServiceEntry } from '../store/types.js';

export const HANDLERS = ['tls', 'http', 'redirect'] as const;

export interface ServiceIn {
  port: number;
  destination_port?: number;
  handlers?: string[];
}

/** `redirect` sends clients from port 80 to the HTTPS port (the API spec's port rule 3). */
export const REDIRECT_TARGET = 443;

interface PortRule {
  n: number;
  applies: (port: number) => boolean;
  ok: (h: Set<string>, destination: number, port: number) => boolean;
  msg: string;
}

/**
 * The spec's four port constraints (the API spec's connection handler rules), as a
 * table of (rule number, applies to port, check, message).
 */
const RULES: readonly PortRule[] = [
  {
    n: 1,
    applies: (p) => p === 80,
    ok: (h) => h.has('http') && !h.has('tls'),
    msg: "port 80 must have the 'http' handler and must not have 'tls'",
  },
  {
    n: 2,
    applies: (p) => p === 443,
    ok: (h) => h.has('http') && h.has('tls'),
    msg: "port 443 must have the 'http' and 'tls' handlers",
  },
  {
    n: 3,
    applies: () => true,
    ok: (h, dst, p) => !h.has('redirect') || (p === 80 && dst === REDIRECT_TARGET),
    msg: `'redirect' may only be set on port 80, to redirect to port ${REDIRECT_TARGET}`,
  },
  {
    n: 4,
    applies: (p) => p !== 80 && p !== 443,
    ok: (h) => h.has('tls') && !h.has('http'),
    msg: "ports other than 80 and 443 must have the 'tls' handler and must not have 'http'",
  },
];

function checkOne(s: ServiceIn): ServiceEntry {
  const handlers = [...new Set(s.handlers ?? [])];
  for (const h of handlers) {
    if (!(HANDLERS as readonly string[]).includes(h)) {
      throw err('UH_INVALID', `port ${s.port}: unknown handler '${h}' (allowed: ${HANDLERS.join(', ')})`);
    }
  }
  const set = new Set(handlers);
  // A redirect leads to the HTTPS port unless told otherwise; redirecting 80 to itself would loop.
  const destination = s.destination_port ?? (set.has('redirect') ? REDIRECT_TARGET : s.port);
  for (const r of RULES) {
    if (r.applies(s.port) && !r.ok(set, destination, s.port))
      throw err('UH_INVALID', `port ${s.port}: port rule ${r.n}: ${r.msg}`);
  }
  return { port: s.port, destination_port: destination, handlers };
}

/** Which public ports tenants may publish (the operator's `gateway.allowedPorts`, less the platform's own). */
export interface PortPolicy {
  /** single ports and `a-b` ranges */
  allowed: readonly string[];
  /** ports the platform itself listens on (the API) */
  taken: readonly number[];
}

/** The port policy of a configuration: the operator's open ports, less the API's own. */
export function portPolicy(config: { listen: string; gateway: { allowedPorts: readonly string[] } }): PortPolicy {
  const apiPort = Number(/:(\d+)$/.exec(config.listen)?.[1] ?? 0);
  return { allowed: config.gateway.allowedPorts, taken: apiPort > 0 ? [apiPort] : [] };
}

/** Refuses a port outside the policy, saying which ports are open. */
export function checkPortPolicy(port: number, p: PortPolicy): void {
  const open = p.allowed.some((r) => {
    const [a, b] = r.split('-').map(Number) as [number, number | undefined];
    return port >= a && port <= (b ?? a);
  });
  if (p.taken.includes(port))
    throw err('UH_INVALID', `port ${port} is the platform's own (its API listens there): publish another port`);
  if (!open) {
    throw err(
      'UH_INVALID',
      `port ${port} is not open to services on this platform (open: ${p.allowed.join(', ')}; the operator's gateway.allowedPorts)`,
    );
  }
}

/** Validates published services and fills in defaults; throws UH_INVALID naming the broken rule. */
export function checkServices(services: ServiceIn[], policy?: PortPolicy): ServiceEntry[] {
  const ports = new Set<number>();
  return services.map((s) => {
    if (ports.has(s.port)) throw err('UH_INVALID', `port ${s.port} is published twice`);
    if (policy) checkPortPolicy(s.port, policy);
    ports.add(s.port);
    return checkOne(s);
  });
}
