import { EventEmitter } from 'node:events';
import { existsSync } from 'node:fs';
import { createConnection, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** QMP's event timestamp (host wall clock when QEMU emitted the event). */
export interface QmpTimestamp {
  seconds: number;
  microseconds: number;
}

/** A command QEMU answered with `{"error": {class, desc}}`. */
export class QmpError extends Error {
  constructor(
    readonly command: string,
    readonly qmpClass: string,
    readonly desc: string,
  ) {
    super(`QMP ${command}: ${qmpClass}: ${desc}`);
    this.name = 'QmpError';
  }
}

interface Pending {
  command: string;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

type Message = Record<string, unknown>;

/**
 * Splits a byte stream into newline-delimited JSON messages. QEMU writes one
 * message per line but the socket may deliver half a line or several lines
 * in one chunk, so the tail is kept until its newline arrives.
 */
export class JsonLineParser {
  private buf = '';

  /**
   * `maxLine`: the longest line kept waiting for its newline (characters).
   * QEMU's largest answers (query-qmp-schema) are a few hundred KiB; a peer
   * that sends more without a newline is not QEMU speaking QMP, and must not
   * grow the daemon's memory without end.
   */
  constructor(private readonly maxLine = 8 * 1024 * 1024) {}

  /** Feeds a chunk; returns the complete messages it finished (malformed lines are skipped). Throws past `maxLine`. */
  push(chunk: string): Message[] {
    this.buf += chunk;
    const out: Message[] = [];
    let nl: number;
    while ((nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (!line) continue;
      try {
        const msg: unknown = JSON.parse(line);
        if (msg && typeof msg === 'object' && !Array.isArray(msg)) out.push(msg as Message);
      } catch {
        // QEMU never writes invalid JSON; skipping keeps one bad line from wedging the stream.
      }
    }
    if (this.buf.length > this.maxLine) {
      this.buf = '';
      throw new LineTooLong(this.maxLine);
    }
    return out;
  }
}

/** A QMP peer sent a line longer than the parser keeps. */
export class LineTooLong extends Error {
  constructor(readonly maxLine: number) {
    super(`a QMP message longer than ${maxLine} characters without a newline`);
  }
}

const RETRYABLE = new Set(['ENOENT', 'ECONNREFUSED', 'EAGAIN']);

/**
 * A QMP client over a unix socket. Events: `'event' (name, data, timestamp)`
 * for every asynchronous QMP event, `'close' ()` once when the socket ends
 * (QEMU exited, `quit`, or `close()`).
 */
export class QmpClient extends EventEmitter {
  private readonly pending = new Map<number, Pending>();
  private readonly parser: JsonLineParser;
  /** why the connection was closed from here, for the pending commands' errors */
  private closeReason = '';
  private nextId = 1;
  private closed = false;
  private greeting: ((msg: Message) => void) | undefined;

  private constructor(
    private readonly socket: Socket,
    maxLine?: number,
  ) {
    super();
    this.parser = new JsonLineParser(maxLine);
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => this.onData(chunk));
    // An 'error' is always followed by 'close'; the listener only keeps it from throwing.
    socket.on('error', () => {});
    socket.on('close', () => this.onClose());
  }

  /**
   * Connects, retrying until `timeoutMs` (the socket appears a few ms after
   * QEMU starts), reads the greeting and negotiates capabilities. Call once
   * per QEMU; QEMU serves one QMP client per socket at a time.
   */
  static async connect(path: string, timeoutMs = 5000, maxLine?: number): Promise<QmpClient> {
    const deadline = Date.now() + timeoutMs;
    const socket = await connectWithRetry(path, deadline);
    return QmpClient.handshake(new QmpClient(socket, maxLine), deadline);
  }

  /** Greeting + `qmp_capabilities`, both bounded by the connect deadline (a hung QEMU must not hang us). */
  private static async handshake(client: QmpClient, deadline: number): Promise<QmpClient> {
    let timedOut = false;
    const timer = setTimeout(
      () => {
        timedOut = true;
        client.close();
      },
      Math.max(0, deadline - Date.now()),
    );
    let onClose: (() => void) | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        client.greeting = (msg) => (msg.QMP ? resolve() : reject(new Error('QMP greeting missing')));
        onClose = () => reject(new Error('QMP socket closed before the greeting'));
        client.once('close', onClose);
      });
      await client.execute('qmp_capabilities');
      return client;
    } catch (e) {
      client.close();
      throw timedOut ? new Error('QMP handshake timed out', { cause: e }) : e;
    } finally {
      clearTimeout(timer);
      if (onClose) client.off('close', onClose);
    }
  }

  /**
   * Runs a command. Rejects with a `QmpError` (QMP's class and desc) when
   * QEMU refuses it, or with an Error if the socket closes before the reply
   * (normal for `quit` if QEMU is faster than its own reply).
   */
  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T> {
    if (this.closed) return Promise.reject(new Error(`QMP ${command}: connection closed`));
    const id = this.nextId++;
    const msg: Message = { execute: command, id };
    if (args) msg.arguments = args;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { command, resolve: resolve as (v: unknown) => void, reject });
      this.socket.write(JSON.stringify(msg) + '\n');
    });
  }

  /** Closes the socket; pending commands reject and 'close' is emitted. Safe to call twice. */
  close(): void {
    this.socket.destroy();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  private onData(chunk: string): void {
    let msgs: Message[];
    try {
      msgs = this.parser.push(chunk);
    } catch (e) {
      // an endless line: the connection goes (pending commands reject with the reason, 'close' follows)
      this.closeReason = (e as Error).message;
      this.socket.destroy();
      return;
    }
    for (const msg of msgs) this.dispatch(msg);
  }

  private dispatch(msg: Message): void {
    if (this.greeting) {
      const g = this.greeting;
      this.greeting = undefined;
      g(msg);
      return;
    }
    if (typeof msg.event === 'string') {
      this.emit('event', msg.event, msg.data, msg.timestamp as QmpTimestamp);
      return;
    }
    const p = typeof msg.id === 'number' ? this.pending.get(msg.id) : undefined;
    if (!p) return; // a reply to nobody (e.g. after a timeout-less caller went away): nothing to do
    this.pending.delete(msg.id as number);
    if ('error' in msg) {
      const e = (msg.error ?? {}) as { class?: string; desc?: string };
      p.reject(new QmpError(p.command, e.class ?? 'GenericError', e.desc ?? 'unknown error'));
    } else {
      p.resolve(msg.return);
    }
  }

  private onClose(): void {
    if (this.closed) return;
    this.closed = true;
    const why = this.closeReason ? ` (${this.closeReason})` : '';
    for (const p of this.pending.values()) p.reject(new Error(`QMP ${p.command}: connection closed${why}`));
    this.pending.clear();
    this.emit('close');
  }
}

async function connectWithRetry(path: string, deadline: number): Promise<Socket> {
  for (;;) {
    // until QEMU has made its socket, a stat per try (a failed connect costs a socket and an error: ~15 of
    // them while a guest boots under TCG, on the core it boots on)
    if (!existsSync(path) && Date.now() < deadline) {
      await sleep(Math.min(2, Math.max(1, deadline - Date.now())));
      continue;
    }
    try {
      return await connectOnce(path);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? '';
      if (!RETRYABLE.has(code) || Date.now() >= deadline) {
        throw new Error(`QMP connect ${path}: ${(e as Error).message}`, { cause: e });
      }
      // a short wait: a VM restored from a snapshot runs as soon as QMP can resume it
      await sleep(Math.min(2, Math.max(1, deadline - Date.now())));
    }
  }
}

function connectOnce(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = createConnection(path);
    s.once('connect', () => {
      s.off('error', reject);
      resolve(s);
    });
    s.once('error', reject);
  });
}
