/**
 * Kernel command line of the guest boot contract (docs/guest-contract.md §1):
 * `<image kernel_args> <platform args> -- <application args>`. Words are
 * grouped with double or single quotes, without escapes (Unikraft's parser),
 * so a word may not hold both quote characters.
 */

/** Why a word cannot be passed on the command line, or null. */
export function wordProblem(w: string): string | null {
  if (/[\n\r\0]/.test(w)) return 'must not contain newlines or NUL characters';
  if (w.includes('"') && w.includes("'")) return 'must not contain both single and double quotes';
  return null;
}

export function quoteWord(w: string): string {
  if (w !== '' && !/[\s"']/.test(w)) return w;
  return w.includes('"') ? `'${w}'` : `"${w}"`;
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
