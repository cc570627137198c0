/**
 * Readiness probes of booting instances (docs/guest-contract.md): every
 * ready port of the instance's private IP is probed; when all accept,
 * `onListening(id, at)` is called. A probe is aborted when the VM ends or
 * the controller stops.
 */
export class ReadinessProbes {
  private readonly running = new Map<string, AbortController>();

  constructor(
    private readonly probePort: (ip: string, port: number, signal: AbortSignal) => Promise<void>,
    private readonly onListening: (id: string, at: number) => void,
  ) {}

  start(id: string, ip: string, ports: number[]): void {
    if (this.running.has(id)) return;
    const ac = new AbortController();
    this.running.set(id, ac);
    Promise.all(ports.map((p) => this.probePort(ip, p, ac.signal))).then(
      () => {
        this.running.delete(id);
        this.onListening(id, Date.now());
      },
      () => undefined, // aborted: the VM ended or the daemon stops
    );
  }

  end(id: string): void {
    this.running.get(id)?.abort(new Error('probe ended'));
    this.running.delete(id);
  }

  endAll(): void {
    for (const id of [...this.running.keys()]) this.end(id);
  }
}
