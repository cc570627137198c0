/**
 * What a stock Unikraft kernel's console tells the host (docs/guest-contract.md
 * §5): when the kernel hands over to the application, and why it crashed.
 * Stock kernels have no control channel, so the console is the only witness;
 * the patterns follow what Unikraft's own code prints (ukboot's banner,
 * plat/common/x86/traps.c, nolibc's abort, ukrandom, UK_ASSERT).
 */

/**
 * The banner's last line: the release name and version under the ASCII art
 * (`                         Calypso 0.17.0`, `Telesto 0.16.3~abc`). ukboot
 * prints the banner right before it calls `main`, after every init level ran.
 */
const VERSION_LINE = /^[ \t]+[A-Z][A-Za-z]+ \d+\.\d+\.\d+\S*[ \t]*\r?$/m;

/**
 * Offset just past the banner's version line (its newline included), or -1
 * while the kernel has not handed over to the application yet.
 */
export function handoverOffset(console: string): number {
  const start = console.indexOf('Powered by');
  if (start < 0) return -1;
  const rest = console.slice(start);
  const m = VERSION_LINE.exec(rest);
  if (!m) return -1;
  const nl = rest.indexOf('\n', m.index + m[0].length);
  return nl < 0 ? -1 : start + nl + 1;
}

/** `reason` values of the spec's stop code. */
export const REASON = { OK: 0, EXP: 1, MATH: 2, INVLOP: 3, PGFAULT: 4, SEGFAULT: 5, HWERR: 6, SECERR: 7 } as const;

/** Init level of the stop code while the application runs. */
export const APP_INITLVL = 127;

export interface UnikraftCrash {
  reason: number;
  errno: number;
  /** Unikraft init class where it happened (1 early .. 6 late), 127 in the application, 0 before any */
  initlvl: number;
  /** the console line that told */
  line: string;
}

/** Unhandled x86 traps by the names plat/common/x86/traps.c prints: name → [reason, errno]. */
const TRAPS: Record<string, [number, number]> = {
  'divide error': [REASON.MATH, 0],
  overflow: [REASON.MATH, 0],
  bounds: [REASON.SEGFAULT, 14],
  'invalid opcode': [REASON.INVLOP, 0],
  'device not available': [REASON.MATH, 0],
  'invalid TSS': [REASON.SEGFAULT, 0],
  'segment not present': [REASON.SEGFAULT, 7],
  'stack segment': [REASON.SEGFAULT, 7],
  'general protection': [REASON.SEGFAULT, 14],
  coprocessor: [REASON.MATH, 0],
  'alignment check': [REASON.SEGFAULT, 7],
  'machine check': [REASON.HWERR, 5],
  'SIMD coprocessor': [REASON.MATH, 0],
  'control protection': [REASON.SECERR, 1],
  'double fault': [REASON.HWERR, 0],
  'virtualization error': [REASON.HWERR, 0],
};

/** The same by x86 vector, for consoles that print no name. */
const TRAP_NUMBERS: Record<number, [number, number]> = {
  0: [REASON.MATH, 0],
  6: [REASON.INVLOP, 0],
  13: [REASON.SEGFAULT, 14],
  14: [REASON.PGFAULT, 14],
  18: [REASON.HWERR, 5],
};

/** Failed init functions: [pattern with the negative errno in group 1, Unikraft init class]. */
const INIT_FAILURES: ReadonlyArray<[RegExp, number]> = [
  // lib/ukrandom runs as an early initcall (class 1) and needs RDRAND and RDSEED; TCG has no RDSEED
  [/Could not initialize the HWRNG \((-?\d+)\)/, 1],
];

const lineOf = (text: string, index: number): string => {
  const s = text.lastIndexOf('\n', index) + 1;
  const e = text.indexOf('\n', index);
  return text.slice(s, e < 0 ? undefined : e).replace(/\r$/, '');
};

/**
 * The crash a Unikraft console shows, or null when it shows none. `handedOver`:
 * the banner was printed (the crash hit the application, init level 127).
 */
export function unikraftCrash(console: string, handedOver = handoverOffset(console) >= 0): UnikraftCrash | null {
  const lvl = handedOver ? APP_INITLVL : 0;
  for (const [re, initlvl] of INIT_FAILURES) {
    const m = re.exec(console);
    if (m) return { reason: REASON.EXP, errno: Math.abs(Number(m[1])), initlvl, line: lineOf(console, m.index) };
  }
  const trap = /Unhandled Trap (\d+)(?: \(([^)]+)\))?/.exec(console);
  if (trap) {
    const [reason, errno] = TRAPS[trap[2] ?? ''] ?? TRAP_NUMBERS[Number(trap[1])] ?? [REASON.EXP, 0];
    return { reason, errno, initlvl: lvl, line: lineOf(console, trap.index) };
  }
  // do_page_fault dumps the registers and crashes without an "Unhandled Trap" line.
  const pf = /page fault handler returned error|RIP: [0-9a-f]{16} CS: [0-9a-f]{4}/.exec(console);
  if (pf) return { reason: REASON.PGFAULT, errno: 14, initlvl: lvl, line: lineOf(console, pf.index) };
  const abort = /Abnormal termination!?|Assertion failure:|Crashing/.exec(console);
  if (abort) return { reason: REASON.EXP, errno: 0, initlvl: lvl, line: lineOf(console, abort.index) };
  return null;
}
