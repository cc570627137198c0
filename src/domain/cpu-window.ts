/** One CPU reading: wall clock (ms) and the process's CPU time so far (ms). */
export interface CpuSample {
  t: number;
  cpuMs: number;
}

/**
 * A small ring of CPU readings of one process, kept for an evaluation
 * window. The utilization is the CPU time spent between the oldest and
 * newest reading in the window over the wall time between them, in
 * millicores (1000 = one core busy).
 */
export class CpuWindow {
  private readonly ring: CpuSample[] = [];

  constructor(private readonly windowMs: number) {}

  add(s: CpuSample): void {
    const last = this.ring[this.ring.length - 1];
    // A counter that went backwards is a new process (a restart): its history starts over.
    if (last && (s.cpuMs < last.cpuMs || s.t <= last.t)) this.ring.length = 0;
    this.ring.push(s);
    // Keep one reading at or before the window's start so the window is covered whole.
    while (this.ring.length > 2 && this.ring[1]!.t <= s.t - this.windowMs) this.ring.shift();
  }

  /**
   * Millicores over the window, or over its readings from `since` (ms) on;
   * undefined until two such readings exist.
   */
  millicores(since = -Infinity): number | undefined {
    const first = this.ring.find((r) => r.t >= since);
    const last = this.ring[this.ring.length - 1];
    if (!first || !last || last.t <= first.t) return undefined;
    return Math.round(((last.cpuMs - first.cpuMs) / (last.t - first.t)) * 1000);
  }

  get size(): number {
    return this.ring.length;
  }
}
