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

/** Validates published services and fills in defaults; throws UH_INVALID naming the broken rule. */
export function checkServices(services: ServiceIn[]): ServiceEntry[] {
  const ports = new Set<number>();
  return services.map((s) => {
    if (ports.has(s.port)) throw err('UH_INVALID', `port ${s.port} is published twice`);
    ports.add(s.port);
    return checkOne(s);
  });
}
