import { existsSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import type { ControlState } from '../driver.js';
import { applyControlLine, emptyControl } from '../stop-info.js';
import { HeldFile } from './held-file.js';

/**
 * Control text read per boot at most. The protocol is a few short lines per
 * boot (docs/guest-contract.md §2); a guest that writes more is misbehaving.
 */
export const CONTROL_BUDGET = 64 * 1024;

export interface ControlTailOptions {
  /** the control chardev's file (QEMU appends to it) */
  path: string;
  /** where the parsed state is kept once the file is truncated (read again on adoption) */
  savedPath: string;
  budget?: number;
  /** called once when the guest exceeds the budget */
  onFlood?: (bytes: number) => void;
}

/**
 * Follows a VM's control channel incrementally: keeps only the parsed
 * state and the partial last line, reads at most `budget` bytes per boot,
 * and past that stops parsing and keeps truncating the file, so neither the
 * daemon's memory nor the host file grows with what the guest writes.
 */
export class ControlTail {
  readonly state: ControlState = emptyControl();
  private readonly file: HeldFile;
  private offset = 0;
  private partial = '';
  private used = 0;
  private flooded = false;
  private readonly budget: number;

  /** `adopted`: the VM ran before; a state saved by an earlier daemon replaces re-reading. */
  constructor(
    private readonly o: ControlTailOptions,
    adopted = false,
  ) {
    this.budget = o.budget ?? CONTROL_BUDGET;
    this.file = new HeldFile(o.path);
    if (adopted) this.loadSaved();
  }

  /** Lets the file go (the VM ended). */
  close(): void {
    this.file.close();
  }

  /** Whether the guest wrote more than the budget this boot. */
  get overflowed(): boolean {
    return this.flooded;
  }

  /** Reads what the guest wrote since the last call; true when the state changed. */
  pump(): boolean {
    if (this.flooded) {
      truncateIfAny(this.o.path);
      return false;
    }
    const chunk = this.file.readFrom(this.offset, this.budget - this.used);
    if (chunk.length === 0) return false;
    this.offset += chunk.length;
    this.used += chunk.length;
    const before = JSON.stringify(this.state);
    const lines = (this.partial + chunk.toString('latin1')).split('\n');
    this.partial = lines.pop()!;
    for (const l of lines) applyControlLine(this.state, l);
    if (this.used >= this.budget) this.overflow();
    return JSON.stringify(this.state) !== before;
  }

  private overflow(): void {
    this.flooded = true;
    this.partial = '';
    // Saved before the truncation: an adopting daemon then never re-reads a cut history.
    writeFileSync(this.o.savedPath, JSON.stringify(this.state));
    truncateIfAny(this.o.path);
    this.o.onFlood?.(this.used);
  }

  private loadSaved(): void {
    if (!existsSync(this.o.savedPath)) return;
    try {
      Object.assign(this.state, JSON.parse(readFileSync(this.o.savedPath, 'utf8')) as ControlState);
      this.flooded = true;
    } catch {
      /* unreadable: re-read the file from the start (still bounded by the budget) */
    }
  }
}

/** QEMU opens the file with O_APPEND, so after a truncation its writes restart at 0. */
function truncateIfAny(path: string): void {
  try {
    if (statSync(path).size > 0) truncateSync(path, 0);
  } catch {
    /* not created yet, or removed with the VM */
  }
}
