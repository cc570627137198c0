import type { Logger } from 'pino';

/**
 * Logs client misbehaviour (garbage, refused names, caps reached) without
 * letting a flood of it flood the log: at most `perWindow` lines per kind per
 * window, then one line saying how many were suppressed.
 */
export class LogLimiter {
  private readonly seen = new Map<string, { n: number; since: number }>();

  constructor(
    private readonly log: Logger,
    private readonly perWindow = 20,
    private readonly windowMs = 10_000,
  ) {}

  warn(kind: string, obj: Record<string, unknown>, msg: string): void {
    this.emit('warn', kind, obj, msg);
  }

  info(kind: string, obj: Record<string, unknown>, msg: string): void {
    this.emit('info', kind, obj, msg);
  }

  private emit(level: 'warn' | 'info', kind: string, obj: Record<string, unknown>, msg: string): void {
    const now = Date.now();
    let s = this.seen.get(kind);
    if (!s || now - s.since > this.windowMs) {
      if (s && s.n > this.perWindow) {
        this.log[level]({ kind, suppressed: s.n - this.perWindow }, 'gateway: similar messages suppressed');
      }
      if (this.seen.size > 1000) this.seen.clear();
      this.seen.set(kind, (s = { n: 0, since: now }));
    }
    if (++s.n <= this.perWindow) this.log[level]({ kind, ...obj }, msg);
  }
}
