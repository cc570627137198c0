/** A uniform integer in [0, n) (n <= 256) from Web Crypto: this module also runs in the web console. */
function randomInt(n: number): number {
  const limit = 256 - (256 % n); // rejection keeps every value equally likely
  const b = new Uint8Array(1);
  do globalThis.crypto.getRandomValues(b);
  while (b[0]! >= limit);
  return b[0]! % n;
}

/** Maximum total length of an object name (the API spec's identifier types). */
export const NAME_MAX = 121;
/** Maximum length of an autoscale policy name. */
export const POLICY_NAME_MAX = 31;

const BAD_CHAR = /[^a-z0-9.-]/;

/**
 * Checks a name against the spec's rules (RFC 1035 labels, at most 121
 * characters, no trailing dot, no consecutive hyphens or dots). Returns the
 * lower-cased name, or a message saying what is wrong (completes "it ...").
 */
export function checkName(raw: string, max = NAME_MAX): { ok: true; name: string } | { ok: false; why: string } {
  const name = raw.toLowerCase();
  if (name.length === 0) return { ok: false, why: 'must not be empty' };
  if (name.length > max) return { ok: false, why: `is ${name.length} characters long; at most ${max} are allowed` };
  const bad = BAD_CHAR.exec(name);
  if (bad) return { ok: false, why: `contains '${bad[0]}'; only letters, digits, hyphens and dots are allowed` };
  if (name.endsWith('.')) return { ok: false, why: 'must not end with a dot' };
  if (name.includes('..')) return { ok: false, why: 'must not contain consecutive dots' };
  if (name.includes('--')) return { ok: false, why: 'must not contain consecutive hyphens' };
  for (const label of name.split('.')) {
    if (label.length === 0) return { ok: false, why: 'must not start with a dot' };
    if (label.length > 63)
      return { ok: false, why: `has a label of ${label.length} characters; labels are at most 63` };
    if (!/^[a-z]/.test(label))
      return { ok: false, why: `has a label starting with '${label[0]}'; labels must start with a letter` };
    if (label.endsWith('-'))
      return { ok: false, why: `has a label ending with '-'; labels must end with a letter or digit` };
  }
  return { ok: true, name };
}

const ALNUM = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** Random lower-case alphanumeric suffix of `n` characters. */
export function randomSuffix(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += ALNUM[randomInt(ALNUM.length)];
  return s;
}

const WORDS_A = [
  'amber',
  'brave',
  'calm',
  'dapper',
  'eager',
  'fancy',
  'gentle',
  'happy',
  'icy',
  'jolly',
  'keen',
  'lively',
  'merry',
  'noble',
  'odd',
  'proud',
  'quiet',
  'rapid',
  'silent',
  'tidy',
  'upbeat',
  'vivid',
  'witty',
  'young',
];
const WORDS_B = [
  'ant',
  'bear',
  'crane',
  'dingo',
  'eagle',
  'falcon',
  'gecko',
  'heron',
  'ibis',
  'jaguar',
  'koala',
  'lynx',
  'moose',
  'newt',
  'otter',
  'panda',
  'quail',
  'raven',
  'seal',
  'tiger',
  'urchin',
  'viper',
  'walrus',
  'yak',
];

/** Service group default name: `<word>-<word>-<8 random>`. */
export function serviceGroupDefaultName(): string {
  return `${WORDS_A[randomInt(WORDS_A.length)]}-${WORDS_B[randomInt(WORDS_B.length)]}-${randomSuffix(8)}`;
}

/** Volume default name: `vol-<5 random>`. */
export function volumeDefaultName(): string {
  return `vol-${randomSuffix(5)}`;
}

/**
 * Instance default name: `<app>-<5 random>`, `<app>` taken from the image
 * reference and reduced to a valid label.
 */
export function instanceDefaultName(app: string): string {
  let base = app
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/-+/g, '-')
    .replace(/^[^a-z]+/, '')
    .replace(/-+$/, '');
  if (base.length === 0) base = 'instance';
  base = base.slice(0, 50).replace(/-+$/, '');
  return `${base}-${randomSuffix(5)}`;
}
