import { join } from 'node:path';
import type { Config } from '../config.js';
import { parseSubnet, type Subnet } from '../domain/ipam.js';
import type { Store } from '../store/types.js';
import { AutoscaleService } from './autoscale.js';
import { CertificateService } from './certificates.js';
import { GroupService } from './groups.js';
import { ImageService } from './images.js';
import { InstanceService } from './instances.js';
import { UserService } from './users.js';
import { VolumeService } from './volumes.js';

export interface Clock {
  /** milliseconds since the epoch */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** Where the daemon keeps files in its data dir. */
export interface Paths {
  db: string;
  images: string;
  instance(id: string): string;
  volume(id: string): string;
  /** certificate chains and keys (src/certs/files.ts) */
  certs: string;
  /** ACME account key and state */
  acme: string;
}

export function pathsFor(dataDir: string): Paths {
  return {
    db: join(dataDir, 'unihost.db'),
    images: join(dataDir, 'images'),
    instance: (id) => join(dataDir, 'instances', id),
    volume: (id) => join(dataDir, 'volumes', `${id}.ext4`),
    certs: join(dataDir, 'certs'),
    acme: join(dataDir, 'acme'),
  };
}

/** Everything a service may use; wired once by the entry point. */
export interface Deps {
  config: Config;
  store: Store;
  clock: Clock;
  paths: Paths;
  subnet: Subnet;
  users: UserService;
  instances: InstanceService;
  groups: GroupService;
  volumes: VolumeService;
  certificates: CertificateService;
  autoscale: AutoscaleService;
  images: ImageService;
  /** background controllers, set by the daemon once started */
  controllers?: unknown[];
}

export type Services = Deps;

export function createServices(config: Config, store: Store, clock: Clock = systemClock): Services {
  const deps = { config, store, clock, paths: pathsFor(config.dataDir), subnet: parseSubnet(config.subnet) } as Deps;
  deps.users = new UserService(store, config);
  deps.instances = new InstanceService(deps);
  deps.groups = new GroupService(deps);
  deps.volumes = new VolumeService(deps);
  deps.certificates = new CertificateService(deps);
  deps.autoscale = new AutoscaleService(deps);
  deps.images = new ImageService(deps);
  return deps;
}
