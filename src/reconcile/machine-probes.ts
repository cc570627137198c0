/** How long the connections of a restore's ports (`touch`, below) may take. */
const TOUCH_MS = 2000;

/**
 * Readiness probes of booting instances (docs/guest-contract.md): every
 * ready port of the instance's private IP is probed; when all accept,
 * `onListening(id, at)` is called. A probe is aborted when the VM ends or
 * the controller stops.
 *
 * A boot says where its probe will go as soon as its VM is spawned
 * (`expect`), and the probe starts the moment the driver sees the guest
 * ready (`ready`), not after the instance's earlier marks are recorded: each
 * of those is a transaction, and under the load of a failover (16 boots on
 * 2 cores) they kept a ready mark waiting 0.5-0.8 s in the instance's queue
 * while the port was open. `start` is the path of VMs whose boot this
 * process did not see (adopted ones); a probe runs at most once a boot.
 *
 * A restore whose ports accepted in its snapshot is running once it
 * resumes, without a probe; its ports still get one connection each at the
 * resume (`expect` with `gate` false), awaited by nothing: a new QEMU under
 * TCG translates the guest's network path afresh on its first connection
 * (6-15 ms here), and that is better spent while the platform records the
 * resume and the client connects than on the client's own request.
 */
export class ReadinessProbes {
  private readonly running = new Map<string, AbortController>();
  /** where the coming probe of a boot goes, until the guest is ready */
  private readonly expected = new Map<string, { ip: string; ports: number[]; gate: boolean }>();
  /** boots whose probe has started (running or done) */
  private readonly started = new Set<string>();

  constructor(
    private readonly probePort: (ip: string, port: number, signal: AbortSignal) => Promise<void>,
    private readonly onListening: (id: string, at: number) => void,
  ) {}

  /**
   * A boot was spawned: its probe goes to `ip` on `ports` once the guest is
   * ready; with `gate` false (a restore running once resumed) the ports are
   * only connected to, once, and nothing waits for them.
   */
  expect(id: string, ip: string, ports: number[], gate = true): void {
    this.end(id);
    if (ports.length > 0) this.expected.set(id, { ip, ports, gate });
  }

  /** The driver saw the guest ready: the expected probe starts now. */
  ready(id: string): void {
    const t = this.expected.get(id);
    if (!t) return;
    this.expected.delete(id);
    if (t.gate) this.start(id, t.ip, t.ports);
    else this.touch(id, t.ip, t.ports);
  }

  /** One connection to each port (retried on refusal for at most TOUCH_MS), its end unobserved. */
  private touch(id: string, ip: string, ports: number[]): void {
    const ac = new AbortController();
    this.running.set(id, ac);
    const timer = setTimeout(() => ac.abort(new Error('touch ended')), TOUCH_MS);
    timer.unref();
    void Promise.allSettled(ports.map((p) => this.probePort(ip, p, ac.signal))).then(() => {
      clearTimeout(timer);
      if (this.running.get(id) === ac) this.running.delete(id);
    });
  }

  /** Starts the probe of this boot, unless it has started already. */
  start(id: string, ip: string, ports: number[]): void {
    if (this.started.has(id)) return;
    this.started.add(id);
    this.expected.delete(id);
    const ac = new AbortController();
    this.running.set(id, ac);
    Promise.all(ports.map((p) => this.probePort(ip, p, ac.signal))).then(
      () => {
        if (this.running.get(id) !== ac) return; // ended meanwhile
        this.running.delete(id);
        this.onListening(id, Date.now());
      },
      () => undefined, // aborted: the VM ended or the daemon stops
    );
  }

  /** The VM ended, or a new boot begins: its probe stops and is forgotten. */
  end(id: string): void {
    this.running.get(id)?.abort(new Error('probe ended'));
    this.running.delete(id);
    this.expected.delete(id);
    this.started.delete(id);
  }

  endAll(): void {
    for (const id of new Set([...this.running.keys(), ...this.expected.keys(), ...this.started])) this.end(id);
  }
}
