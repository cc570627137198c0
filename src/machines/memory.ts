import { rmSync } from 'node:fs';
import { ConsoleLog } from './console-log.js';
import type { ControlState, MachineDriver, MachineEvent, MachineRuntime, MachineSpec } from './driver.js';
import { emptyControl } from './stop-info.js';

/** What a memory VM reports: fixed figures, so tests can tell them from absent ones. */
export const MEMORY_VM_STATS = Object.freeze({ cpuMs: 42, rssBytes: 8 << 20 });

interface MemoryVm {
  spec: MachineSpec;
  pid: number;
  /** console lines of this boot */
  console: string;
  /** paused by `pause` (until `resume`) */
  paused: boolean;
}

/** A guest that reached its application (init and ready seen), then `over`. */
const control = (over: Partial<ControlState>): ControlState => ({
  ...emptyControl(),
  init: true,
  ready: true,
  ...over,
});

/**
 * The machine driver of unit tests and of a daemon that boots nothing
 * (`machines.driver: "memory"`): a "VM" is an entry in a map. It goes
 * through the same events as a QEMU guest that follows the guest contract
 * (loaded, init, ready at once; a clean shutdown with exit status 0 when
 * asked to stop; no clean end when killed), writes a line to the console
 * log per step, and ends with the daemon (nothing to adopt). `exit` and
 * `crash` play an application that ends by itself.
 */
export class MemoryMachines implements MachineDriver {
  readonly name = 'memory';
  private readonly vms = new Map<string, MemoryVm>();
  private pid = 100_000;
  /** boots so far, by instance id (tests) */
  readonly boots = new Map<string, number>();

  constructor(
    private readonly onEvent: (id: string, ev: MachineEvent) => void,
    private readonly now: () => number = Date.now,
  ) {}

  async start(spec: MachineSpec): Promise<MachineRuntime> {
    if (this.vms.has(spec.id)) throw new Error(`VM ${spec.id} is already running`);
    const vm: MemoryVm = { spec, pid: ++this.pid, console: '', paused: false };
    this.vms.set(spec.id, vm);
    this.boots.set(spec.id, (this.boots.get(spec.id) ?? 0) + 1);
    const spawnedAt = this.now();
    this.say(vm, `memory VM: booting ${spec.kernel} with ${spec.memoryMb} MB (${spec.cmdline})`);
    // Reported after `start` resolves, like a real VMM's: the controller records the boot first.
    setImmediate(() => {
      for (const type of ['loaded', 'init', 'ready'] as const) {
        if (this.vms.get(spec.id) !== vm) return;
        if (type === 'ready') this.say(vm, 'memory VM: the application runs');
        this.onEvent(spec.id, { type, at: this.now() });
      }
    });
    return { pid: vm.pid, spawnedAt, accel: 'memory' };
  }

  /** Memory VMs end with the daemon that ran them. */
  async adopt(spec: MachineSpec): Promise<boolean> {
    setImmediate(() => this.onEvent(spec.id, this.exitEvent('', control({}), null)));
    return false;
  }

  /** The guest honours the request: its application exits with 0 and it shuts down. */
  async stop(id: string): Promise<void> {
    const vm = this.vms.get(id);
    if (!vm) return;
    this.say(vm, 'memory VM: shutdown requested');
    setImmediate(() => this.end(id, control({ stop: true, shutdown: true, exit: 0 }), 0));
  }

  async kill(id: string): Promise<void> {
    this.end(id, control({}), null);
  }

  /** Ends the VM if it runs (reported like a kill) and removes its files. */
  async delete(id: string, dir: string): Promise<void> {
    this.end(id, control({}), null);
    rmSync(dir, { recursive: true, force: true });
  }

  async pause(id: string): Promise<void> {
    const vm = this.vms.get(id);
    if (!vm) throw new Error('the VM is not running');
    vm.paused = true;
    this.say(vm, 'memory VM: paused');
  }

  async resume(id: string): Promise<void> {
    const vm = this.vms.get(id);
    if (!vm) throw new Error('the VM is not running');
    vm.paused = false;
    this.say(vm, 'memory VM: runs on');
  }

  /** Whether `pause` holds the VM (tests). */
  paused(id: string): boolean {
    return this.vms.get(id)?.paused ?? false;
  }

  inspect(id: string): { running: boolean; pid: number | null } {
    const vm = this.vms.get(id);
    return { running: !!vm, pid: vm?.pid ?? null };
  }

  list(): string[] {
    return [...this.vms.keys()];
  }

  stats(id: string): { cpuMs: number; rssBytes: number } | undefined {
    return this.vms.has(id) ? MEMORY_VM_STATS : undefined;
  }

  async close(): Promise<void> {
    this.vms.clear();
  }

  /** The application ends by itself with `code` and the guest shuts down. */
  exit(id: string, code: number): void {
    this.end(id, control({ stop: true, shutdown: true, exit: code }), 0);
  }

  /** The guest kernel crashes (a page fault), with the console line a kernel would print. */
  crash(id: string): void {
    const vm = this.vms.get(id);
    if (vm) this.say(vm, 'BUG: unable to handle page fault for address: 0000000000000000');
    this.end(id, control({}), 1);
  }

  private end(id: string, c: ControlState, status: number | null): void {
    const vm = this.vms.get(id);
    if (!vm) return;
    this.vms.delete(id);
    this.onEvent(id, this.exitEvent(vm.console, c, status));
  }

  private exitEvent(console: string, c: ControlState, status: number | null): MachineEvent {
    return { type: 'exit', at: this.now(), status, panicked: false, control: c, stderr: '', console };
  }

  private say(vm: MemoryVm, line: string): void {
    vm.console += `${line}\n`;
    new ConsoleLog(vm.spec.dir).append(Buffer.from(`${line}\n`));
  }
}
