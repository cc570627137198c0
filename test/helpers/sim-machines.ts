import type { Controller } from '../../src/daemon.js';
import { MEMORY_VM_STATS } from '../../src/machines/memory.js';
import type { Services } from '../../src/services/index.js';
import { fire } from '../../src/domain/instance-states.js';
import { LocalFigures } from '../../src/reconcile/figures.js';
import type { GatewayController } from '../../src/reconcile/gateway.js';
import type { AutoscaleController } from '../../src/reconcile/autoscale.js';

export interface SimStats {
  cpuMs: number;
  rssBytes: number;
}

/** CPU time and RSS every simulated running VM reports (the machine controller's `stats`): the memory driver's. */
export const SIM_STATS: SimStats = MEMORY_VM_STATS;

export type SimMachines = Controller & {
  stats(id: string): SimStats | undefined;
  /** the instances it has "booted" and that run (the driver's `list`) */
  list(): string[];
  pause(on: boolean): void;
};

/**
 * A simulated machine controller for control-plane API tests only: it moves
 * instances through their states at once (starting -> running, stopping or
 * draining -> stopped, standby or template) without booting anything (a
 * stop that keeps the memory leaves a snapshot record, and no file), and
 * marks new volumes available. Lifecycle tests with real VMs use the QEMU driver instead; the
 * daemon's own controllers over the in-memory drivers (src/drivers.ts) are
 * tested in test/api/memory-drivers.test.ts.
 */
export function simMachines(
  s: Services,
  /** `volumes: false`: leave volumes to a real VolumeController (test/api/sdk.test.ts) */
  o: { volumes?: boolean } = {},
): SimMachines {
  let off: (() => void) | null = null;
  // Instances the simulation has "booted": they report fixed figures, like a VM's process would report real ones.
  const up = new Set<string>();
  // A paused simulation moves nothing: a host where boots hang (tests of bounds).
  let paused = false;
  const step = async (id: string): Promise<void> => {
    if (paused) return;
    await s.store.tx(async (tx) => {
      const i = await tx.instances.getAny(id);
      if (!i) return;
      const now = new Date(s.clock.now()).toISOString();
      if (i.state !== 'running') up.delete(i.id);
      if (i.state === 'checkpoint' && i.snapshot?.pending) {
        // a checkpoint asked for: "written" at once (a record, no file)
        const { pending: _, ...written } = i.snapshot;
        await tx.instances.updateStatus(i.id, { snapshot: { ...written, bytes: 4096, machine: 'sim', vmm: 'sim' } });
        return;
      }
      if (i.state === 'starting' && i.desired === 'running') {
        up.add(i.id);
        // fixed timings, so tests can tell developer-only fields from absent ones
        await fire(tx, i, 'booted', {
          // a "snapshot" is restored, and so consumed (a template's stays: it is the template's record)
          ...(i.snapshot ? { snapshot: null } : {}),
          start_count: i.start_count + 1,
          started_at: now,
          boot_time_us: 1000,
          vmm_start_time_us: 100,
          vmm_load_time_us: 200,
          vmm_ready_time_us: 300,
          net_time_us: 400,
        });
      } else if ((i.state === 'stopping' || i.state === 'draining') && i.desired === 'running') {
        // a start that came during the stop: the "VM" ends and boots again
        const stopped = await fire(tx, i, 'exited', { stop_request: null });
        if (stopped) await fire(tx, stopped, 'start');
      } else if ((i.state === 'stopping' || i.state === 'draining') && i.desired === 'stopped') {
        const r = i.stop_request;
        const effects = {
          stopped_at: now,
          stop_reason: r?.force ? 28 : r?.by === 'platform' ? 7 : 15,
          exit_code: r?.force ? null : 0,
          stop_code: r?.force ? null : 0,
          stop_request: null,
          uptime_ms: i.uptime_ms + Math.max(0, s.clock.now() - Date.parse(i.started_at ?? now)),
        };
        // a stop that keeps the memory (suspend, stateful standby, a template): a record as a snapshot would leave
        const snapshot =
          r?.snapshot && !r.force
            ? {
                bytes: 4096,
                created_at: now,
                reason: r.snapshot,
                image: i.image,
                memory_mb: i.memory_mb,
                machine: 'sim',
                vmm: 'sim',
              }
            : null;
        if (snapshot) await tx.instances.updateStatus(i.id, { snapshot });
        if (i.features.includes('delete-on-stop'))
          await s.instances.deleteInTx(tx, (await tx.users.get(i.user_id))!, i);
        else if (snapshot?.reason === 'template') await fire(tx, { ...i, snapshot }, 'templated', effects);
        else if (!(r?.standby && (await fire(tx, i, 'slept', effects)))) await fire(tx, i, 'exited', effects);
      }
    });
  };
  const volume = async (id: string): Promise<void> => {
    await s.store.tx(async (tx) => {
      const v = (await tx.volumes.all()).find((x) => x.id === id);
      if (v?.state === 'initializing') await tx.volumes.update(v.id, { state: v.instance_id ? 'idle' : 'available' });
    });
  };
  // Steps still queued when the daemon closes must not touch the closed store.
  let stopped = false;
  const pending = new Set<Promise<void>>();
  const later = (fn: () => Promise<void>): void => {
    setImmediate(() => {
      if (stopped) return;
      // a step that fails (the store unreachable) is the next change's to redo, as a reconcile would be
      const p = fn()
        .catch(() => undefined)
        .finally(() => pending.delete(p));
      pending.add(p);
    });
  };
  const sim: SimMachines = {
    async start() {
      off = s.store.watch('now', (e) => {
        if (e.type === 'change' && e.kind === 'instance') later(() => step(e.id));
        if (e.type === 'change' && e.kind === 'volume' && o.volumes !== false) later(() => volume(e.id));
      });
    },
    stats(id) {
      return up.has(id) ? SIM_STATS : undefined;
    },
    list() {
      return [...up];
    },
    pause(on) {
      paused = on;
    },
    async stop() {
      stopped = true;
      off?.();
      await Promise.allSettled([...pending]);
    },
  };
  // what the daemon's wiring does for the real machine controller (src/controllers.ts)
  wireFigures(s, { sim });
  return sim;
}

/**
 * The services' live figures from the controllers a test wires by hand, as
 * src/controllers.ts does for the daemon's own: named one by one.
 */
export function wireFigures(
  s: Services,
  o: {
    sim?: { stats(id: string): SimStats | undefined };
    gateway?: GatewayController;
    autoscale?: AutoscaleController;
  },
): void {
  s.figures = new LocalFigures({
    vm: o.sim && ((id) => o.sim!.stats(id)),
    connections: o.gateway && ((id) => o.gateway!.connections(id)),
    gateway: o.gateway && (() => o.gateway!.dataPlane!.counters()),
    cpuMillicores: o.autoscale && ((id) => o.autoscale!.cpuMillicores(id)),
    decisions: o.autoscale && (() => o.autoscale!.decisionCounts()),
  });
}
