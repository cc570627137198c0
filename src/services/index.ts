import type { Clock } from '../clock.js';
import { HostConsoles } from './consoles.js';
import { systemClock } from '../clock.js';
import type { Config } from '../config.js';
import { parseSubnet } from '../network/address.js';
import { pathsFor } from '../paths.js';
import type { InstanceRec, Store, Tx } from '../store/types.js';
import { StoreFigures } from '../figures.js';
import { LocalConsoles } from '../machines/console-log.js';
import { AutoscaleService } from './autoscale.js';
import { CertificateService } from './certificates.js';
import { DomainProofs } from './domain-proofs.js';
import type { ServiceBase } from './deps.js';
import { GroupService } from './groups.js';
import { HostService } from './hosts.js';
import { moveInTx } from './capacity.js';
import { NodeService } from './nodes.js';
import { ImageService } from './images.js';
import { InstanceService } from './instances.js';
import { RegistryService } from './registry.js';
import { UserService } from './users.js';
import { VolumeService } from './volumes.js';

/**
 * The wired services, what the API and the daemon hold. Each service gets
 * this same object and reads the peers it declares in its own deps type
 * (peers are looked up at call time, so the order of construction is free).
 */
export interface Services extends ServiceBase {
  users: UserService;
  instances: InstanceService;
  groups: GroupService;
  volumes: VolumeService;
  certificates: CertificateService;
  autoscale: AutoscaleService;
  images: ImageService;
  nodes: NodeService;
  registry: RegistryService;
  hosts: HostService;
  placement: { moveInTx(tx: Tx, inst: InstanceRec): Promise<string> };
}

export function createServices(config: Config, store: Store, clock: Clock = systemClock): Services {
  const paths = pathsFor(config.dataDir);
  const base: ServiceBase = {
    config,
    store,
    clock,
    paths,
    subnet: parseSubnet(config.subnet),
    hostId: '',
    hostSlot: 0,
    lease: { held: () => true },
    // a process that measures nothing reads what the measuring ones publish (src/controllers.ts replaces it)
    figures: new StoreFigures(store, () => clock.now()),
    consoles: new LocalConsoles((id) => paths.instance(id)),
    proofs: new DomainProofs(config.domainProof, store, config.metroDomain, () => clock.now()),
  };
  // with several hosts, the log of an instance that ran on another host is read from its agent
  base.consoles = new HostConsoles({ store, hostId: () => base.hostId, local: base.consoles });
  const s = base as Services;
  s.users = new UserService(store, config);
  s.instances = new InstanceService(s);
  s.groups = new GroupService(s);
  s.volumes = new VolumeService(s);
  s.certificates = new CertificateService(s);
  s.autoscale = new AutoscaleService(s);
  s.images = new ImageService(s);
  s.nodes = new NodeService(s);
  s.registry = new RegistryService(s);
  s.hosts = new HostService(s);
  s.placement = { moveInTx: (tx, inst) => moveInTx(tx, config.capacity, inst) };
  return s;
}
