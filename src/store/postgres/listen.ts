import pg from 'pg';

/** Pause before connecting again after the connection was lost: 0.5 s doubled up to 10 s. */
const BACKOFF_MS = [500, 1000, 2000, 5000, 10_000];

/**
 * LISTEN on one dedicated connection, kept open: `wake` runs for every
 * notification on `channel`, and once more after each (re)connect, since
 * notifications sent while it was down are lost (the feed then reads what
 * it missed from the change table). A lost connection is reconnected with a
 * growing pause, never thrown at the process.
 */
export class Listener {
  private client: pg.Client | undefined;
  private stopped = false;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly channel: string,
    private readonly wake: () => void,
    private readonly log: (msg: string, e?: unknown) => void,
  ) {}

  /** Connects once (throws when it cannot: the store's open reports it). */
  async start(): Promise<void> {
    await this.connect();
  }

  private async connect(): Promise<void> {
    const c = new pg.Client(this.config);
    c.on('error', (e) => this.lost(c, e));
    c.on('end', () => this.lost(c));
    c.on('notification', () => this.wake());
    try {
      await c.connect();
      await c.query(`LISTEN ${this.channel}`);
    } catch (e) {
      c.on('error', () => undefined);
      await c.end().catch(() => undefined);
      throw e;
    }
    if (this.stopped) return void (await c.end().catch(() => undefined));
    this.client = c;
    if (this.failures > 0) this.log('listening for changes again');
    this.failures = 0;
    this.wake();
  }

  private lost(c: pg.Client, e?: unknown): void {
    if (this.client !== c || this.stopped) return;
    this.client = undefined;
    c.removeAllListeners('end');
    c.on('error', () => undefined);
    void c.end().catch(() => undefined);
    this.log('the change notifications connection was lost; reconnecting', e);
    this.retry();
  }

  private retry(): void {
    if (this.stopped) return;
    const ms = BACKOFF_MS[Math.min(this.failures, BACKOFF_MS.length - 1)]!;
    this.failures++;
    this.timer = setTimeout(() => {
      this.connect().catch(() => this.retry());
    }, ms);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const c = this.client;
    this.client = undefined;
    if (c) {
      c.removeAllListeners('end');
      c.on('error', () => undefined);
      await c.end().catch(() => undefined);
    }
  }
}
