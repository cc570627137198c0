import { err } from '../errors.js';
import type { ServiceEntry } from '../store/types.js';

export const HANDLERS = ['tls', 'http', 'redirect'] as const;

export interface ServiceIn {
  port: number;
  destination_port?: number;
  handlers?: string[];
}

/**
 * The spec's four port constraints (api-v1.md, Connection handlers), as a
 * table of (applies to port, rule, message).
 */
const RULES: ReadonlyArray<[(port: number) => boolean, (h: Set<string>) => boolean, string]> = [
  [(p) => p === 80, (h) => h.has('http') && !h.has('tls'), "port 80 must have the 'http' handler and must not have 'tls'"],
  [(p) => p === 443, (h) => h.has('http') && h.has('tls'), "port 443 must have the 'http' and 'tls' handlers"],
  [(p) => p !== 80, (h) => !h.has('redirect'), "'redirect' may only be set on port 80 (to redirect to 443)"],
  [(p) => p !== 80 && p !== 443, (h) => h.has('tls') && !h.has('http'), "ports other than 80 and 443 must have 'tls' and must not have 'http'"],
];

/** Validates published services and fills in defaults; throws UH_INVALID naming the broken rule. */
export function checkServices(services: ServiceIn[]): ServiceEntry[] {
  const ports = new Set<number>();
  return services.map((s) => {
    if (ports.has(s.port)) throw err('UH_INVALID', `port ${s.port} is published twice`);
    ports.add(s.port);
    const handlers = [...new Set(s.handlers ?? [])];
    for (const h of handlers) {
      if (!(HANDLERS as readonly string[]).includes(h)) {
        throw err('UH_INVALID', `port ${s.port}: unknown handler '${h}' (allowed: ${HANDLERS.join(', ')})`);
      }
    }
    const set = new Set(handlers);
    for (const [applies, ok, msg] of RULES) {
      if (applies(s.port) && !ok(set)) throw err('UH_INVALID', `port ${s.port}: ${msg}`);
    }
    return { port: s.port, destination_port: s.destination_port ?? s.port, handlers };
  });
}
