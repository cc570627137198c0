import type { Clock } from '../clock.js';
import type { ConsoleReader, LiveFigures } from '../figures.js';
import type { Config } from '../config.js';
import type { Subnet } from '../network/address.js';
import type { Paths } from '../paths.js';
import type { InstanceRec, Store, Tx, UserRec } from '../store/types.js';
import type { DomainProofs } from './domain-proofs.js';

/**
 * What every service is built on. It names no service: each service module
 * adds the peers it calls (e.g. `InstanceDeps` in instances-create.ts), so
 * no service module imports the module that wires them all (index.ts).
 */
export interface ServiceBase {
  config: Config;
  store: Store;
  clock: Clock;
  paths: Paths;
  subnet: Subnet;
  /** the host this process's agent registered ('' in a process without the agent role) */
  hostId: string;
  /** its slot on the private network (0 in a process without the agent role): its gateway address, docs/hosts.md */
  hostSlot: number;
  /** its lease (src/reconcile/host-lease.ts): the agent acts only while it is held; always in other processes */
  lease: { held(): boolean };
  /** live figures of VMs and the gateway (src/figures.ts): this process's own, or those published in the store */
  figures: LiveFigures;
  /** instances' console logs, where their host keeps them */
  consoles: ConsoleReader;
  /** proofs of control of custom domains in DNS, looked up before a request's transaction */
  proofs: DomainProofs;
  /**
   * This process's gateway, when it runs one: `whenRouted` resolves once it
   * routes a group (its ports bound, its names mapped), or after `ms`. A
   * create or start with wait answers `running` then (docs/gateway.md).
   */
  gateway?: { whenRouted(groupId: string, ms: number): Promise<void> };
}

/** The instance rules other services apply inside their own transactions (autoscale clones, standby masters). */
export interface InstanceLifecycle {
  /** creates one instance from instance-create parameters (an autoscale master from `create_args`) */
  createOneInTx(tx: Tx, user: UserRec, p: NewInstanceParams): Promise<InstanceRec>;
  startInTx(tx: Tx, user: UserRec, inst: InstanceRec, manual: boolean): Promise<InstanceRec>;
  deleteInTx(tx: Tx, user: UserRec, inst: InstanceRec): Promise<void>;
}

/** The instance-create parameters another service passes (a subset of instances-create.ts's `CreateParams`). */
export interface NewInstanceParams {
  name?: string;
  image: string;
  args?: string | string[];
  env?: Record<string, string>;
  memory_mb?: number;
  restart_policy?: string;
  service_group?: { uuid: string };
  autostart?: boolean;
}
