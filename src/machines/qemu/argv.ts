import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { MachineSpec } from '../driver.js';

export interface QemuOptions {
  accel: 'kvm' | 'tcg';
  /** TCG translation buffer in MB (smaller: less RSS); 0 = QEMU default */
  tbSizeMb: number;
  /** host TSC kHz for `tsc_early_khz` (microvm guests hang without it); 0 = omit */
  tscKhz: number;
}

/** qboot from Debian's qemu-system-data: a minimal firmware that loads -kernel faster than SeaBIOS. */
export const QBOOT_ROM = '/usr/share/qemu/qboot.rom';

/** Files QEMU reads and writes in an instance's runtime dir. */
export const runtimeFiles = (dir: string) => ({
  qmp: join(dir, 'qmp.sock'),
  control: join(dir, 'control.log'),
  /** the parsed control state, kept once control.log was truncated (a guest that floods it) */
  controlState: join(dir, 'control.json'),
  serial: join(dir, 'serial.raw'),
  /** how much of serial.raw is already in the console log (read again when a VM is adopted) */
  serialPos: join(dir, 'serial.pos'),
  stderr: join(dir, 'qemu.err'),
});

/**
 * The QEMU command line of docs/guest-contract.md §3. `microvm` uses
 * virtio-mmio devices, `pc` virtio-pci (Unikraft multiboot kernels).
 */
export function qemuArgv(spec: MachineSpec, o: QemuOptions): string[] {
  const f = runtimeFiles(spec.dir);
  const micro = spec.machine === 'microvm';
  const accel = o.accel === 'tcg' && o.tbSizeMb > 0 ? `tcg,tb-size=${o.tbSizeMb}` : o.accel;
  let cmdline = spec.cmdline;
  if (micro && o.tscKhz > 0) cmdline = injectBeforeDashes(cmdline, `tsc_early_khz=${o.tscKhz}`);
  const a = [
    '-name',
    `unihost-${spec.id}`,
    '-M',
    micro ? 'microvm' : 'pc',
    '-accel',
    accel,
    '-cpu',
    o.accel === 'kvm' ? 'qemu64' : 'max',
    '-smp',
    '1',
    '-m',
    String(spec.memoryMb),
    '-nodefaults',
    '-no-user-config',
    // not -nographic: it turns on SeaBIOS's serial console, whose text and terminal escapes would
    // precede the kernel's first line in the console log (and cost ~40 ms under TCG)
    '-display',
    'none',
    '-no-reboot',
    '-kernel',
    spec.kernel,
  ];
  if (!micro && spec.firmware === 'qboot') a.push('-bios', QBOOT_ROM);
  if (spec.initrd) a.push('-initrd', spec.initrd);
  a.push('-append', cmdline);
  a.push('-chardev', `file,id=con,path=${f.serial},append=on`, '-serial', 'chardev:con');
  if (spec.contract === 'unihost')
    // append=on (O_APPEND): after the driver truncates a flooded file, QEMU's writes restart at 0
    a.push('-chardev', `file,id=ctl,path=${f.control},append=on`, '-device', 'isa-serial,chardev=ctl,index=1');
  else a.push('-device', 'isa-debug-exit,iobase=0x501,iosize=2');
  a.push('-device', 'pvpanic', '-action', 'panic=exit-failure');
  a.push('-qmp', `unix:${f.qmp},server=on,wait=off`);
  if (spec.nic) {
    a.push('-netdev', `tap,id=net0,ifname=${spec.nic.tap},script=no,downscript=no`);
    // romfile= : no iPXE option ROM (its banner would reach the console, and nothing boots from the NIC)
    a.push('-device', `${micro ? 'virtio-net-device' : 'virtio-net-pci,romfile='},netdev=net0,mac=${spec.nic.mac}`);
  }
  // a snapshot arrives on the descriptor the driver passes as fd 3 (machines/qemu/snapshot.ts)
  if (spec.restore) a.push('-incoming', 'fd:3');
  // A snapshot of this VM carries no run state (it is taken paused): the QEMU that loads it runs the
  // guest the moment the load ends, without waiting for a `cont` (snapshot.ts, resumeRestored)
  a.push('-global', 'migration.store-global-state=off');
  for (const d of spec.disks) {
    a.push('-drive', `file=${d.path},if=none,id=${d.tag},format=raw${d.readonly ? ',readonly=on' : ''}`);
    a.push('-device', `${micro ? 'virtio-blk-device' : 'virtio-blk-pci'},drive=${d.tag},serial=${d.tag}`);
  }
  return a;
}

/** Puts a kernel parameter before the `--` that starts the application args. */
function injectBeforeDashes(cmdline: string, param: string): string {
  const i = cmdline.search(/(^|\s)--(\s|$)/);
  if (i < 0) return `${cmdline} ${param}`.trim();
  return `${cmdline.slice(0, i)} ${param}${cmdline.slice(i)}`.replace(/^\s+/, '');
}

/** Host TSC frequency in kHz (microvm has no HPET or PM timer: a Linux guest cannot calibrate the TSC and hangs without `tsc_early_khz`), or 0 when unknown. */
export function hostTscKhz(): number {
  try {
    const m = /cpu MHz\s*:\s*([\d.]+)/.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    return m ? Math.round(Number(m[1]) * 1000) : 0;
  } catch {
    return 0;
  }
}
