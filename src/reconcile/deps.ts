import type { ChallengeAnswers } from '../certs/challenges.js';
import type { CertFiles } from '../certs/files.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Paths } from '../paths.js';
import type { InstanceRec, ServiceGroupRec, Store, Tx, UserRec } from '../store/types.js';

/** A part of the daemon that runs in the background (reconcilers, gateway). */
export interface Controller {
  /** called once, in the daemon's start order (src/controllers.ts) */
  start(): Promise<void>;
  /** called once at shutdown; leaves the VMs running for the next daemon to adopt */
  stop(): Promise<void>;
}

/**
 * What the controllers use. The services' object (src/services/index.ts)
 * satisfies it; declaring it here keeps the controllers below the services:
 * they name the few service rules they apply in their own transactions
 * (a restart by policy, an autoscale clone) without importing services/.
 */
export interface ControllerDeps {
  config: Config;
  store: Store;
  clock: Clock;
  paths: Paths;
  /** the host this process's agent registered (src/services/hosts.ts): the controllers act on what is placed there */
  hostId: string;
  /** its lease: the agent's controllers act only while it is held (fencing, docs/hosts.md) */
  lease: { held(): boolean };
  /** the instance rules a controller applies itself: restart by policy, wake, delete a stopped clone */
  instances: {
    startInTx(
      tx: Tx,
      user: UserRec,
      inst: InstanceRec,
      manual: boolean,
      trigger?: 'start' | 'wake',
    ): Promise<InstanceRec>;
    deleteInTx(tx: Tx, user: UserRec, inst: InstanceRec): Promise<void>;
  };
  /** placement (src/services/capacity.ts): failover and drain move instances without a VM to other hosts */
  placement: { moveInTx(tx: Tx, inst: InstanceRec): Promise<string> };
  /** the autoscale rules the autoscale controller applies when it scales */
  autoscale: {
    cloneInTx(tx: Tx, user: UserRec, g: ServiceGroupRec, master: InstanceRec): Promise<InstanceRec>;
    drainCloneInTx(tx: Tx, user: UserRec, i: InstanceRec, drainMs: number): Promise<void>;
    standbyInTx(tx: Tx, master: InstanceRec): Promise<void>;
  };
  /** the certificate files and HTTP-01 answers the gateway and the ACME controller share with the API */
  certificates: { files: CertFiles; challenges: ChallengeAnswers };
}
