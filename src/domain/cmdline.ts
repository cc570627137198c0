/**
 * Kernel command line of the guest boot contract (docs/guest-contract.md §1):
 * `<image kernel_args> <platform args> -- <application args>`. Words are
 * grouped with double or single quotes, without escapes (Unikraft's parser),
 * so a word with both quote characters is quoted in runs (quoteWord).
 */

/** Why an application argument cannot be passed on the command line, or null. */
export function wordProblem(w: string): string | null {
  if (/[\n\r\0]/.test(w)) return 'must not contain newlines or NUL characters';
  return null;
}

/**
 * Why an env value cannot be passed, or null. Env entries travel inside the
 * `env.vars=[ ... ]` array as one quoted word each (docs/api.md promises the
 * rule): a value holding both quote characters cannot be quoted that way.
 */
export function envValueProblem(v: string): string | null {
  return wordProblem(v) ?? (v.includes('"') && v.includes("'") ? 'must not contain both \' and " quotes' : null);
}

/**
 * Host encoding of one word (guest contract §1): bare when it needs no
 * quotes, else quoted with the quote character it does not contain, else
 * split into runs without `"` / without `'`, each quoted, concatenated.
 */
export function quoteWord(w: string): string {
  if (w !== '' && !/[\s"']/.test(w)) return w;
  if (!w.includes('"')) return `"${w}"`;
  if (!w.includes("'")) return `'${w}'`;
  // Greedy runs: at each point take the longer stretch free of one quote character.
  let out = '';
  for (let i = 0; i < w.length;) {
    const noDq = (w.indexOf('"', i) + 1 || w.length + 1) - 1;
    const noSq = (w.indexOf("'", i) + 1 || w.length + 1) - 1;
    const end = Math.max(noDq, noSq);
    out += noDq >= noSq ? `"${w.slice(i, end)}"` : `'${w.slice(i, end)}'`;
    i = end;
  }
  return out;
}

/** Always quoted: array elements of `env.vars` and `vfs.fstab`. */
const quoted = (w: string): string => (w.includes('"') ? `'${w}'` : `"${w}"`);

export interface CmdlineParts {
  kernelArgs: string;
  env: Record<string, string>;
  /** `vfs.fstab` entries: tag, mount point, read-only */
  mounts: { tag: string; at: string; readonly: boolean }[];
  /** `netdev.ip` value, e.g. `10.88.0.2/16:10.88.0.1:10.88.0.1` */
  netdevIp?: string;
  args: string[];
}

export function buildCmdline(p: CmdlineParts): string {
  const parts: string[] = [];
  if (p.kernelArgs.trim()) parts.push(p.kernelArgs.trim());
  if (p.netdevIp) parts.push(`netdev.ip=${p.netdevIp}`);
  const env = Object.entries(p.env);
  if (env.length > 0) parts.push(`env.vars=[ ${env.map(([k, v]) => quoted(`${k}=${v}`)).join(' ')} ]`);
  if (p.mounts.length > 0) {
    const entries = p.mounts.map((m) => quoted(`${m.tag}:${m.at}:ext4:${m.readonly ? '1' : ''}::`));
    parts.push(`vfs.fstab=[ ${entries.join(' ')} ]`);
  }
  parts.push('--');
  parts.push(...p.args.map(quoteWord));
  return parts.join(' ');
}
