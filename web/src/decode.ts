// Words for the numbers the API returns: stop reasons and stop codes (the API spec's bit tables),
// sizes, durations and ages. Pure functions: test/web/decode.test.ts checks them.

const REASON_BITS: [number, string][] = [
  [4, 'forced stop'],
  [3, 'stopped by the user'],
  [2, 'stopped by the platform'],
  [1, 'the application exited'],
  [0, 'the kernel exited'],
];

/** Whole-value meanings from the spec's table, where one applies. */
const REASON_VALUES: Record<number, string> = {
  28: 'Forced shutdown by the user.',
  15: 'Regular shutdown by the user: the application and the kernel exited.',
  13: 'Shutdown by the user; the kernel ended the application (no exit code).',
  7: 'Shutdown by the platform (for example scale-to-zero): the application and the kernel exited.',
  3: 'The application exited, then the kernel.',
  1: 'Likely a fatal crash: the stop code tells the cause.',
  0: 'Unknown reason.',
};

/** `stop_reason` in words: the spec's sentence for known values, else its bits. */
export function stopReason(v: number): { summary: string; bits: string[] } {
  const bits = REASON_BITS.filter(([b]) => (v & (1 << b)) !== 0).map(([b, w]) => `${'KAPUF'[b]} (${w})`);
  const summary =
    REASON_VALUES[v] ??
    (bits.length ? `${bits.map((b) => b.replace(/^\w \(|\)$/g, '')).join(', ')}.` : 'Unknown reason.');
  return { summary: summary.charAt(0).toUpperCase() + summary.slice(1), bits };
}

const STOP_REASONS: [string, string][] = [
  ['OK', 'clean shutdown'],
  ['EXP', 'invalid state detected, execution stopped to prevent data corruption'],
  ['MATH', 'arithmetic CPU error'],
  ['INVLOP', 'invalid instruction'],
  ['PGFAULT', 'page fault'],
  ['SEGFAULT', 'segmentation fault'],
  ['HWERR', 'hardware error'],
  ['SECERR', 'security violation'],
];

/** Linux errno names most often seen in stop codes. */
const ERRNO: Record<number, string> = {
  1: 'EPERM',
  2: 'ENOENT',
  5: 'EIO',
  9: 'EBADF',
  11: 'EAGAIN',
  12: 'ENOMEM',
  13: 'EACCES',
  14: 'EFAULT',
  16: 'EBUSY',
  22: 'EINVAL',
  28: 'ENOSPC',
  38: 'ENOSYS',
};

/** `stop_code` in words: reason, init level, shutdown bit and errno (the spec's 32-bit layout). */
export function stopCode(v: number): { summary: string; crash: boolean; parts: string[] } {
  const reason = v & 0xff;
  const initlvl = (v >>> 8) & 0x7f;
  const shutdown = ((v >>> 15) & 1) === 1;
  const errno = (v >>> 16) & 0xff;
  const [sym, words] = STOP_REASONS[reason] ?? [`reason ${reason}`, 'unknown reason'];
  const parts = [`${sym}: ${words}`];
  parts.push(initlvl === 127 ? 'while the application was running' : `in init or shutdown phase ${initlvl}`);
  if (shutdown) parts.push('during shutdown');
  if (errno) parts.push(`errno ${errno}${ERRNO[errno] ? ` (${ERRNO[errno]})` : ''}`);
  const summary = reason === 0 ? 'Clean shutdown.' : `Crash: ${words}.`;
  return { summary, crash: reason !== 0, parts };
}

/** 1536 -> "1.5 KiB" */
export function bytes(n: number | undefined | null): string {
  if (n === undefined || n === null) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** A duration in microseconds, in the unit that reads best. */
export function micros(us: number | undefined | null): string {
  if (us === undefined || us === null) return '—';
  if (us < 1000) return `${us} µs`;
  if (us < 1_000_000) return `${(us / 1000).toFixed(us < 10_000 ? 1 : 0)} ms`;
  return `${(us / 1_000_000).toFixed(2)} s`;
}

/** How long ago `iso` was, from `now` (ms): "42 s", "5 min", "3 h", "2 d". */
export function age(iso: string | undefined | null, now = Date.now()): string {
  if (!iso) return '—';
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86_400)} d`;
}

/** A digest shortened for tables: "sha256:0123456789ab". */
export const shortDigest = (d: string | undefined): string =>
  d ? d.replace(/^(sha256:)?([0-9a-f]{12}).*$/, '$1$2') : '—';

/** "KEY=VALUE" lines to an env object; a bad line is named. */
export function parseEnv(text: string): { env: Record<string, string> } | { error: string } {
  const env: Record<string, string> = {};
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '' || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    const key = eq < 0 ? line : line.slice(0, eq);
    if (eq < 0) return { error: `environment line ${i + 1}: '${key}' needs '=VALUE'` };
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key))
      return {
        error: `environment line ${i + 1}: '${key}' is not a variable name (letters, digits and underscores, not starting with a digit)`,
      };
    env[key] = line.slice(eq + 1);
  }
  return { env };
}
