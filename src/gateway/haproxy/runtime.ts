import net from 'node:net';
import pLimit from 'p-limit';

/**
 * HAProxy's Runtime API (management guide, "Unix socket commands"): one
 * command per connection over a unix socket, the answer is everything read
 * until HAProxy closes it. Commands are sent one at a time so that a burst
 * of changes cannot exhaust the socket's accept queue.
 */
export class RuntimeApi {
  private readonly serial = pLimit(1);

  constructor(
    readonly socketPath: string,
    private readonly timeoutMs = 5000,
  ) {}

  /** Sends one command; resolves with HAProxy's answer (trimmed). Rejects when the socket cannot be reached. */
  send(command: string, payload?: string): Promise<string> {
    return this.serial(() => exchange(this.socketPath, command, payload, this.timeoutMs));
  }
}

/** Answers that mean HAProxy refused a command (it answers those in plain text, not with a status). */
const REFUSED = /^(unknown|no such|unable|invalid|error|require|missing|cannot|can't|not found|[a-z ]*failed)/im;

/** True when a Runtime API answer reports a refusal rather than success. */
export function refused(answer: string): boolean {
  return REFUSED.test(answer) && !/^\s*$/.test(answer);
}

function exchange(path: string, command: string, payload: string | undefined, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect(path);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => s.destroy(new Error(`runtime API: no answer to "${command}"`)), timeoutMs);
    s.on('connect', () => {
      // `<<` sends a multi-line payload (certificates), ended by an empty line.
      s.end(payload === undefined ? `${command}\n` : `${command} <<\n${payload.replace(/\n+$/, '')}\n\n`);
    });
    s.on('data', (d: Buffer) => chunks.push(d));
    s.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    s.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString().trim());
    });
  });
}

/** The columns of `show stat` the counters read (counters.ts). */
const STAT_COLUMNS = ['pxname', 'svname', 'scur', 'req_tot', 'stot', 'bin', 'bout'];

/**
 * Parses `show stat` CSV ("# pxname,svname,...") into rows holding the
 * given columns (default: those the counters read) by name; a column the
 * header lacks is absent from every row. Only those: the stats are read 4
 * times a second, and a row of all ~100 columns as an object was most of
 * the poll's cost. The answer to several commands at once (`show stat A;
 * show stat B`) has a header per section; lines before any header (a
 * refusal such as "No such proxy.") are left out.
 */
export function parseStat(csv: string, columns: readonly string[] = STAT_COLUMNS): Record<string, string>[] {
  let at: (readonly [string, number])[] | undefined;
  const rows: Record<string, string>[] = [];
  for (const l of csv.split('\n')) {
    if (l.startsWith('# ')) {
      const names = l.slice(2).split(',');
      at = columns.flatMap((c) => {
        const i = names.indexOf(c);
        return i < 0 ? [] : [[c, i] as const];
      });
      continue;
    }
    // a blank line ends a section; a line that is not CSV (a refusal) has no comma
    if (!at || l.length === 0 || !l.includes(',')) continue;
    const v = l.split(',');
    const row: Record<string, string> = {};
    for (const [c, i] of at) row[c] = v[i] ?? '';
    rows.push(row);
  }
  return rows;
}
