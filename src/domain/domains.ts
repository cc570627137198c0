import { checkName } from './names.js';
import { err } from '../errors.js';

/** A domain of a service group as a request gives it. */
export interface DomainIn {
  name: string;
  certificate?: { uuid?: string; name?: string };
}

/**
 * Turns a requested domain name into an FQDN (stored without the trailing
 * dot). A name ending with a dot is taken as is; any other gets the metro
 * domain appended (the API spec's domain rules 1-2). `custom` is true for
 * domains outside the metro domain: they need their own certificate.
 */
export function parseDomain(name: string, metro: string): { fqdn: string; custom: boolean } {
  const isFqdn = name.endsWith('.');
  const fqdn = (isFqdn ? name.slice(0, -1) : `${name}.${metro}`).toLowerCase();
  const r = checkName(fqdn, 253);
  if (!r.ok) throw err('UH_INVALID', `domain '${name}' is invalid: it ${r.why}`);
  return { fqdn, custom: fqdn !== metro && !fqdn.endsWith(`.${metro}`) };
}
