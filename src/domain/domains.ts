import { checkName } from './names.js';
import { err } from '../errors.js';

/** Most domain names one service group may have. */
export const MAX_DOMAINS_PER_GROUP = 16;

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
  const m = metro.toLowerCase();
  const custom = fqdn !== m && !fqdn.endsWith(`.${m}`);
  // The metro's wildcard certificate covers one label: `a.b.<metro>` would fail TLS, and would sit under `b.<metro>`,
  // another group's (maybe another tenant's) name.
  const label = custom || fqdn === m ? '' : fqdn.slice(0, -m.length - 1);
  if (label.includes('.')) {
    throw err(
      'UH_INVALID',
      isFqdn
        ? `domain '${name}': a name under ${m} has one label ('${label.replace(/\./g, '-')}.${m}.'): its wildcard certificate covers no more`
        : `domain '${name}' would be '${fqdn}', which ${m}'s wildcard certificate does not cover: ` +
            `for your own domain add a trailing dot ('${name}.'); under ${m} use one label ('${name.replace(/\./g, '-')}')`,
    );
  }
  return { fqdn, custom };
}
