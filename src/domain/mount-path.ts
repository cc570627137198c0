import { err } from '../errors.js';

/** Mount path rules: absolute, no `.`/`..` components, no colons (docs/api.md, volume attach). */
export function checkMountPath(at: string): void {
  if (!at.startsWith('/')) throw err('UH_INVALID', `mount path '${at}' must be absolute`);
  if (at.includes(':')) throw err('UH_INVALID', `mount path '${at}' must not contain colons`);
  if (at.split('/').some((c) => c === '.' || c === '..'))
    throw err('UH_INVALID', `mount path '${at}' must not contain '.' or '..' components`);
  if (at === '/') throw err('UH_INVALID', "mount path must not be '/'");
  if (/[\s"'\\[\]]/.test(at))
    throw err('UH_INVALID', `mount path '${at}' must not contain whitespace, quotes, backslashes or brackets`);
}
