/**
 * Records kept by the store and the store interface. The SQLite
 * implementation is the embedded default; every method is asynchronous so a
 * PostgreSQL implementation (one transaction per `tx` on a pooled client) can
 * satisfy the same interface. Invariants that must hold under concurrency are
 * checked inside `tx` (which is serializable) or enforced by constraints.
 */

export type InstanceState =
  | 'stopped'
  | 'starting'
  | 'running'
  | 'draining'
  | 'stopping'
  | 'standby'
  /** an instance made a template (docs/snapshots.md): its memory snapshot is what new instances start from; it never runs again */
  | 'template'
  /** the memory of another instance at one moment (docs/snapshots.md, "Checkpoints"): never runs; instances start from it */
  | 'checkpoint';
export type VolumeState =
  | 'uninitialized'
  | 'initializing'
  | 'available'
  | 'idle'
  | 'mounted'
  | 'busy'
  | 'error'
  /** a volume made a template: read-only, volumes are cloned from it */
  | 'template';
export type CertificateState = 'pending' | 'valid' | 'error';
export type RestartPolicy = 'never' | 'always' | 'on-failure';

export interface Hard {
  instances: number;
  live_instances: number;
  live_memory_mb: number;
  service_groups: number;
  services: number;
  volumes: number;
  total_volume_mb: number;
  /** registry storage: distinct blobs and manifests linked in the user's repositories, MiB rounded up */
  registry_mb: number;
  /** domain names of the user's service groups (metro and custom) */
  domains: number;
  /** certificates: uploaded ones and those the platform requests for custom domains */
  certificates: number;
  /** memory snapshots kept for the user's instances (stateful standby, suspend), MiB rounded up */
  snapshot_mb: number;
}
export type Used = Hard;

export interface Limits {
  min_memory_mb: number;
  max_memory_mb: number;
  min_volume_mb: number;
  max_volume_mb: number;
  min_autoscale_size: number;
  max_autoscale_size: number;
}

export interface QuotaOverrides {
  hard?: Partial<Hard>;
  limits?: Partial<Limits>;
}

/** Content (a blob or a manifest) a registry repository holds. */
export interface RegistryLinkRec {
  repo: string;
  digest: string;
  /** `official` or the owning user's name (quota) */
  namespace: string;
  size: number;
  /** manifests: their media type; blobs: null */
  media_type: string | null;
  created_at: string;
}

export interface RegistryTagRec {
  repo: string;
  tag: string;
  digest: string;
}

export interface UserRec {
  id: string;
  name: string;
  developer: boolean;
  created_at: string;
  quotas: QuotaOverrides;
}

export interface TokenRec {
  id: string;
  user_id: string;
  /** hex sha256 of the token's secret part */
  secret_hash: string;
  created_at: string;
}

/** What the API asked for; reconcilers drive the host to match. */
export type Desired = 'running' | 'stopped';

export interface StopRequest {
  force: boolean;
  /** absolute deadline (ms since epoch) of a drain, or null */
  drain_until: number | null;
  /** 'user' for PUT stop, 'platform' for scale-to-zero and similar */
  by: 'user' | 'platform';
  /** scale-to-zero: once the VM is down the instance is `standby` (woken by traffic), not `stopped` */
  standby?: boolean;
  /**
   * stateful standby, suspend, or becoming a template: the VM's memory is kept in a snapshot (standby and
   * suspend fall back to a plain stop when it cannot be; a template to `stopped`, said in a notice)
   */
  snapshot?: SnapshotReason;
  /** the host gave up on a boot that did not signal ready in time: no start follows the stop */
  gave_up?: boolean;
}

/**
 * What the user asked for (written by services, in the API's transactions):
 * the instance's identity, its image and boot parameters, its private
 * address, and whether it should run (`desired`).
 */
export interface InstanceSpec {
  id: string;
  user_id: string;
  name: string;
  created_at: string;
  image: string;
  image_ref: string;
  memory_mb: number;
  args: string[];
  env: Record<string, string>;
  features: string[];
  restart_policy: RestartPolicy;
  /** the last command: start (user, autostart, wake) or stop (user, scale-to-zero, scale-in) */
  desired: Desired;
  service_group_id: string | null;
  private_ip: string | null;
  mac: string | null;
  nic_id: string | null;
  /** group whose autoscaler created this instance (clones only) */
  autoscale_group_id: string | null;
  /** the user's labels (`PATCH`, prop `tags`) */
  tags: string[];
  /** the user's key-value notes (`PATCH`, prop `annotations`) */
  annotations: Record<string, string>;
  /** while set, delete is refused */
  delete_lock: boolean;
  /** the guest's hostname (netdev.ip); null: the instance name */
  hostname: string | null;
}

/** Where the instance runs: the host whose agent owns its VM, tap and volumes (docs/hosts.md). */
export interface InstancePlacement {
  /** null only for instances of a data dir written before placement existed, until the agent claims them */
  host_id: string | null;
}

/**
 * What the host observes (written by the host's reconcilers). `state` and
 * `stop_request` change only through the state table
 * (`domain/instance-states.ts`), whichever side fires the trigger.
 */
export interface InstanceStatus {
  state: InstanceState;
  /** the stop under way: who asked, forced or not, the drain deadline; set by a stop trigger, cleared when the VM is down */
  stop_request: StopRequest | null;
  start_count: number;
  started_at: string | null;
  stopped_at: string | null;
  uptime_ms: number;
  boot_time_us: number | null;
  stop_reason: number | null;
  exit_code: number | null;
  stop_code: number | null;
  vmm_start_time_us: number | null;
  vmm_load_time_us: number | null;
  vmm_ready_time_us: number | null;
  net_time_us: number | null;
  restart_attempt: number;
  restart_next_at: string | null;
  restart_count: number;
  /** driver-owned runtime facts (pid, sockets) for adoption after restart */
  runtime: Record<string, unknown>;
  /** the memory snapshot this instance resumes from at its next start (stateful standby, suspend); null: none */
  snapshot: SnapshotRec | null;
}

/**
 * A memory snapshot of an instance's VM, kept on its host
 * (docs/snapshots.md). It restores only into what it was taken from: the
 * same image, memory, machine type and VMM build; else the instance boots
 * afresh.
 */
export interface SnapshotRec {
  /** bytes on disk */
  bytes: number;
  created_at: string;
  /** why it was taken: an idle scale-to-zero master, PUT suspend, or the instance made a template */
  reason: SnapshotReason;
  image: string;
  memory_mb: number;
  machine: string;
  /** the VMM's build and accelerator (MachineDriver.snapshotVersion) */
  vmm: string;
  /**
   * The network identity the guest has in this memory: its own, or, for a
   * clone of a template, the template's. A restore whose guest differs from
   * the instance's own address gets both translated on its tap
   * (network/rules.ts), so the guest keeps what it has and the network sees
   * the instance's own address.
   */
  guest?: GuestAddress;
  /**
   * The guest ports that accepted connections when it was taken (the VM's
   * readiness ports, probed when it booted): the listening sockets are in
   * this memory, so a restore whose ready ports are among them is running
   * the moment the guest resumes, without a probe (docs/snapshots.md).
   */
  listening?: number[];
  /** a clone's start from a template: the file is the template's (`source`'s directory), kept after the restore */
  source?: string;
  /** a checkpoint: the instance it was taken of (its history) */
  taken_from?: string;
  /** a checkpoint being taken: no file yet (the host that runs `taken_from` writes it) */
  pending?: boolean;
}

export type SnapshotReason = 'standby' | 'suspend' | 'template' | 'checkpoint';

/** The address and MAC a guest was booted with (on its NIC). */
export interface GuestAddress {
  ip: string;
  mac: string;
}

/** An instance as read: spec, placement and status together. */
export type InstanceRec = InstanceSpec & InstancePlacement & InstanceStatus;

/** The spec fields a service may change after creation. */
export type SpecPatch = Partial<Omit<InstanceSpec & InstancePlacement, 'id' | 'user_id' | 'created_at'>>;
/** The status fields a reconciler writes directly: everything but `state` and `stop_request` (state table only). */
export type StatusPatch = Partial<Omit<InstanceStatus, 'state' | 'stop_request'>>;

export const SPEC_FIELDS = [
  'id',
  'user_id',
  'name',
  'created_at',
  'image',
  'image_ref',
  'memory_mb',
  'args',
  'env',
  'features',
  'restart_policy',
  'desired',
  'service_group_id',
  'private_ip',
  'mac',
  'nic_id',
  'autoscale_group_id',
  'tags',
  'annotations',
  'delete_lock',
  'hostname',
  'host_id',
] as const satisfies readonly (keyof (InstanceSpec & InstancePlacement))[];

export const STATUS_FIELDS = [
  'state',
  'stop_request',
  'start_count',
  'started_at',
  'stopped_at',
  'uptime_ms',
  'boot_time_us',
  'stop_reason',
  'exit_code',
  'stop_code',
  'vmm_start_time_us',
  'vmm_load_time_us',
  'vmm_ready_time_us',
  'net_time_us',
  'restart_attempt',
  'restart_next_at',
  'restart_count',
  'runtime',
  'snapshot',
] as const satisfies readonly (keyof InstanceStatus)[];

/**
 * What an operator made of a host: `live` takes new instances; `cordoned`
 * keeps what runs there and takes nothing new; `draining` has its instances
 * moved elsewhere, one group member at a time; `dead` lost its lease (its
 * instances were moved or stopped). docs/hosts.md.
 */
export type HostState = 'live' | 'cordoned' | 'draining' | 'dead';
export const HOST_STATES: readonly HostState[] = ['live', 'cordoned', 'draining', 'dead'];

/** A host: the machine whose agent runs VMs, taps, volumes and DNS of the instances placed on it. */
export interface HostRec {
  id: string;
  name: string;
  created_at: string;
  /** the agent's address on the hosts' network (VXLAN, the gateway's routes); null: loopback only */
  address: string | null;
  state: HostState;
  /**
   * Counts the leases taken: each (re)registration takes a new one. Writes an
   * agent makes are fenced by it (an agent whose epoch is not the stored one
   * lost its lease and acts no more).
   */
  epoch: number;
  /** which agent process holds the lease (a key kept in its data dir), so a second agent of one name is refused */
  holder: string | null;
  /** the lease runs out then unless renewed (ISO time); past it the host is dead */
  lease_expires_at: string | null;
  /** guest memory budget (MB) the agent published */
  memory_mb: number;
  /** guest vCPU budget the agent published; null: no CPU limit */
  vcpus: number | null;
  /**
   * Its slot on the private network: its bridge's gateway address and MAC
   * (network/address.ts `hostGateway`), unique among hosts, kept for life.
   * null: not taken yet (a row from before slots existed).
   */
  net_slot: number | null;
  /** where the agent serves its instances' console logs on its address (src/agent-server.ts); null: nowhere */
  agent_port: number | null;
  /** the private network settings its agent runs with (`subnet=… bridge=… vni=…`); null: from before they were kept */
  network: string | null;
}

export interface ServiceEntry {
  port: number;
  destination_port: number;
  handlers: string[];
}

export interface ServiceGroupRec {
  id: string;
  user_id: string;
  name: string;
  created_at: string;
  persistent: boolean;
  services: ServiceEntry[];
  /** concurrent requests (HTTP) or connections (TCP) per instance beyond which new ones queue; null: none */
  soft_limit: number | null;
  /** requests or connections per instance, in service and queued, beyond which new ones are refused; null: none */
  hard_limit: number | null;
}

export interface DomainRec {
  fqdn: string;
  group_id: string;
  user_id: string;
  certificate_id: string | null;
}

export interface VolumeRec {
  id: string;
  user_id: string;
  name: string;
  created_at: string;
  size_mb: number;
  state: VolumeState;
  persistent: boolean;
  instance_id: string | null;
  at: string | null;
  readonly: boolean;
  message: string | null;
  /** the user's labels */
  tags: string[];
  /** while set, delete is refused */
  delete_lock: boolean;
  /** space the file system uses, MB, as last measured while no VM had it (null: not measured yet) */
  used_mb: number | null;
  /** a volume (or template) whose image this one copies when it is made (clone), or null */
  source_id: string | null;
  /** the host whose data dir holds the file (null: placed when a host's agent first starts, as instances) */
  host_id: string | null;
}

export interface CertificateRec {
  id: string;
  user_id: string;
  name: string;
  created_at: string;
  common_name: string;
  state: CertificateState;
  validation_attempt: number;
  validation_next: string | null;
  subject: string | null;
  issuer: string | null;
  serial_number: string | null;
  not_before: string | null;
  not_after: string | null;
  message: string | null;
  /** `acme`: requested and renewed by the daemon; `upload`: given by the user, never renewed */
  source: 'acme' | 'upload';
  /** DNS names the current certificate covers (empty until one is issued) */
  names: string[];
  /**
   * An upload whose chain verifies up to a trusted root (src/certs/trust.ts):
   * it claims its name against other accounts. ACME certificates claim by
   * their source (the authority checks control before it issues).
   */
  proven: boolean;
}

export interface StepRec {
  lower_bound: number | null;
  upper_bound: number | null;
  adjustment: number;
}

export interface PolicyRec {
  name: string;
  type: 'step';
  enabled: boolean;
  metric: 'cpu';
  adjustment_type: 'change' | 'exact' | 'percent';
  steps: StepRec[];
}

export interface AutoscaleRec {
  group_id: string;
  user_id: string;
  enabled: boolean;
  min_size: number;
  max_size: number;
  warmup_time_ms: number;
  cooldown_time_ms: number;
  master_id: string;
  policies: PolicyRec[];
}

export interface ImageRec {
  digest: string;
  /** 'official' or a user name */
  namespace: string;
  /** kernel, initrd and metadata come from the OCI layout; this row indexes it */
  size_in_bytes: number;
  initrd: boolean;
  args: string;
  kernel_args: string;
  /** smallest guest memory the image boots with */
  min_memory_mb: number;
  created_at: string;
}

export interface TagRec {
  /** full reference without digest: `app:tag` or `user/app:tag` */
  ref: string;
  namespace: string;
  digest: string;
}

/** A table of records keyed by `id` and scoped by `user_id`. */
export interface UserTable<T extends { id: string; user_id: string; name: string }> {
  get(userId: string, id: string): Promise<T | undefined>;
  getByName(userId: string, name: string): Promise<T | undefined>;
  list(userId: string, where?: Partial<T>): Promise<T[]>;
  insert(rec: T): Promise<void>;
  update(id: string, patch: Partial<T>): Promise<void>;
  delete(id: string): Promise<void>;
}

/** One entry of the instance event log (appended by the store with the change itself). */
export interface EventRec {
  /** the user's own numbering (1, 2, 3 ...), never reused: the SSE event id clients resume from */
  id: number;
  at: string;
  user_id: string;
  instance_id: string;
  instance_name: string;
  group_id: string | null;
  /** `notice`: something the platform did or could not do, in words (`message`), without a state change */
  type: 'created' | 'state' | 'deleted' | 'notice';
  from_state: InstanceState | null;
  to_state: InstanceState | null;
  /** the stop fields, on an event into `stopped` or `standby` */
  stop_reason: number | null;
  exit_code: number | null;
  stop_code: number | null;
  /** what happened, in words (`notice` events) */
  message: string | null;
}

export interface EventFilter {
  /** instance UUID */
  instanceId?: string;
  /** instance name (events of an instance keep the name it had) */
  instanceName?: string;
  groupId?: string;
}

export interface Tx {
  users: {
    get(id: string): Promise<UserRec | undefined>;
    getByName(name: string): Promise<UserRec | undefined>;
    insert(rec: UserRec): Promise<void>;
    update(id: string, patch: Partial<UserRec>): Promise<void>;
    list(): Promise<UserRec[]>;
  };
  tokens: {
    listForUser(userId: string): Promise<TokenRec[]>;
    insert(rec: TokenRec): Promise<void>;
    /** revocation: the token stops authenticating */
    delete(id: string): Promise<void>;
  };
  events: {
    /** The user's events after id `after` (exclusive), oldest first, at most `limit`. */
    after(userId: string, after: number, filter: EventFilter, limit: number): Promise<EventRec[]>;
    /** The user's newest event id (0 when it has none). */
    lastId(userId: string): Promise<number>;
    /** Removes events older than `before` (ISO time), except each user's newest; returns how many went. */
    prune(before: string): Promise<number>;
    /** Appends a `notice` event of an instance: what the platform did or could not do, in words. */
    notice(instance: Pick<InstanceRec, 'id' | 'user_id' | 'name' | 'service_group_id'>, message: string): void;
  };
  instances: Omit<UserTable<InstanceRec>, 'update'> & {
    /** services only: changes what the user asked for */
    updateSpec(id: string, patch: SpecPatch): Promise<void>;
    /** the host's reconcilers only: what they observe (never `state`: see setState) */
    updateStatus(id: string, patch: StatusPatch): Promise<void>;
    /**
     * The state table's writer (`fire` in domain/instance-states.ts, and no
     * other caller): moves the instance from `from` to `to` with the status
     * fields the trigger implies, and appends the state event. Throws
     * UH_CONFLICT when the stored state is not `from` (a decision made on a
     * stale read).
     */
    setState(
      id: string,
      from: InstanceState,
      to: InstanceState,
      patch: StatusPatch & { stop_request?: StopRequest | null },
    ): Promise<void>;
    /** one instance of any user (reconcilers, waits) */
    getAny(id: string): Promise<InstanceRec | undefined>;
    /** every instance of every user (reconcilers) */
    all(): Promise<InstanceRec[]>;
    /** instances (of one user) attached to a group */
    inGroup(groupId: string): Promise<InstanceRec[]>;
    /** the instances of every group with an enabled autoscale configuration (the autoscaler's pass) */
    autoscaled(): Promise<InstanceRec[]>;
    /** ids and names only, ordered by creation (list endpoint) */
    listIds(userId: string, state?: InstanceState): Promise<{ id: string; name: string }[]>;
    /** the same list as a JSON array of `{uuid, name}`, built by the database */
    listJson(userId: string, state?: InstanceState): Promise<string>;
    ipTaken(ip: string): Promise<boolean>;
    /** the instance holding a private IP (DNS: who is asking) */
    getByIp(ip: string): Promise<InstanceRec | undefined>;
    /** live instances (not `stopped`) of every user and their memory, per host: admission control and placement */
    hostLive(): Promise<{ host_id: string | null; vms: number; memory_mb: number }[]>;
    /** the instances placed on a host */
    onHost(hostId: string): Promise<InstanceRec[]>;
    /** private IP of the most recently created instance that has one */
    lastIp(): Promise<string | undefined>;
  };
  hosts: {
    get(id: string): Promise<HostRec | undefined>;
    getByName(name: string): Promise<HostRec | undefined>;
    insert(rec: HostRec): Promise<void>;
    list(): Promise<HostRec[]>;
    update(id: string, patch: Partial<Omit<HostRec, 'id'>>): Promise<void>;
    delete(id: string): Promise<void>;
    /**
     * Moves the lease of host `id` to `expiresAt` if `epoch` still holds it;
     * false when it does not (the lease was lost). Not announced on the
     * change feed: renewals are frequent and change nothing a follower reads.
     */
    renew(id: string, epoch: number, expiresAt: string): Promise<boolean>;
  };
  groups: UserTable<ServiceGroupRec> & {
    getAnyUser(id: string): Promise<ServiceGroupRec | undefined>;
    /** every group of every user (gateway) */
    all(): Promise<ServiceGroupRec[]>;
  };
  domains: {
    get(fqdn: string): Promise<DomainRec | undefined>;
    forGroup(groupId: string): Promise<DomainRec[]>;
    forCertificate(certId: string): Promise<DomainRec[]>;
    insert(rec: DomainRec): Promise<void>;
    delete(fqdn: string): Promise<void>;
    deleteForGroup(groupId: string): Promise<void>;
  };
  volumes: UserTable<VolumeRec> & {
    forInstance(instanceId: string): Promise<VolumeRec[]>;
    /** one volume of any user (reconcilers) */
    getAny(id: string): Promise<VolumeRec | undefined>;
    all(): Promise<VolumeRec[]>;
  };
  certificates: UserTable<CertificateRec> & {
    /** every certificate of every user (issuance, gateway) */
    all(): Promise<CertificateRec[]>;
    /** the certificates of any user whose common name is `fqdn` (domain claims; indexed) */
    named(fqdn: string): Promise<CertificateRec[]>;
  };
  autoscale: {
    get(groupId: string): Promise<AutoscaleRec | undefined>;
    /** every enabled configuration, of every user */
    enabled(): Promise<AutoscaleRec[]>;
    forMaster(instanceId: string): Promise<AutoscaleRec | undefined>;
    insert(rec: AutoscaleRec): Promise<void>;
    update(groupId: string, patch: Partial<AutoscaleRec>): Promise<void>;
    delete(groupId: string): Promise<void>;
  };
  images: {
    get(digest: string): Promise<ImageRec | undefined>;
    upsert(rec: ImageRec): Promise<void>;
    list(): Promise<ImageRec[]>;
    tags(): Promise<TagRec[]>;
    tag(ref: string): Promise<TagRec | undefined>;
    setTag(rec: TagRec): Promise<void>;
    deleteTag(ref: string): Promise<void>;
    /** removes an image record (the collector: untagged, unpinned, in no repository) */
    delete(digest: string): Promise<void>;
  };
  /** The OCI registry's repositories (src/registry/): which content each holds, and its tags. */
  registry: {
    link(rec: RegistryLinkRec): Promise<void>;
    getLink(repo: string, digest: string): Promise<RegistryLinkRec | undefined>;
    /** whether any repository of `namespace` holds `digest` already (it counts toward the quota once) */
    inNamespace(namespace: string, digest: string): Promise<boolean>;
    unlink(repo: string, digest: string): Promise<void>;
    /** every link of one repository, or of all */
    links(repo?: string): Promise<RegistryLinkRec[]>;
    /** one tag, or every tag of a repository sorted by name */
    tag(repo: string, tag: string): Promise<RegistryTagRec | undefined>;
    tags(repo?: string): Promise<RegistryTagRec[]>;
    setTag(rec: RegistryTagRec): Promise<void>;
    deleteTag(repo: string, tag: string): Promise<void>;
  };
  /**
   * Live figures one process publishes for the others (src/figures.ts): not
   * records, so they are never announced on the change feed.
   */
  figures: {
    put(source: string, at: string, data: unknown): Promise<void>;
    list(): Promise<{ source: string; at: string; data: unknown }[]>;
  };
  /**
   * Image content by digest, in chunks (docs/hosts.md, "Images"): with a
   * shared store, the process that imports or receives an image puts its
   * blobs here and the agent of another host that boots it fetches them.
   * Content-addressed, never announced on the change feed; a blob is
   * complete once `finish` recorded it.
   */
  blobs: {
    /** a complete blob's size and number of chunks, or undefined */
    stat(digest: string): Promise<{ size: number; chunks: number } | undefined>;
    putChunk(digest: string, seq: number, data: Uint8Array): Promise<void>;
    finish(digest: string, size: number, chunks: number): Promise<void>;
    chunk(digest: string, seq: number): Promise<Uint8Array | undefined>;
  };
  /**
   * Holds the lock `name` until this transaction ends. Transactions that
   * read and change a total every creator shares (host admission, the
   * address pool) take it first, so they queue instead of failing each
   * other's serialization and retrying (SQLite: writers are serial anyway).
   */
  lock(name: string): Promise<void>;
  /** Current usage of one user's quotas, computed from the records. */
  usage(userId: string): Promise<Used>;
}

export type ChangeKind = 'instance' | 'volume' | 'group' | 'certificate' | 'autoscale' | 'image' | 'user' | 'host';

export interface Change {
  kind: ChangeKind;
  id: string;
}

/**
 * What a watcher of the change feed receives: each committed change once, in
 * commit order, with its revision; or `resync` when changes were missed (the
 * watcher started before the oldest revision kept, or the feed lost track),
 * after which the watcher must re-read everything it keeps.
 */
export type FeedEvent = ({ type: 'change'; rev: number } & Change) | { type: 'resync'; rev: number };

export interface TxOptions {
  /** locks (`Tx.lock`) the transaction will ask for: taken before it begins, saving an attempt */
  locks?: string[];
  /**
   * The transaction reads and writes this one instance (its status, its
   * events, its volumes) and nothing else: a host agent recording what its
   * VM did. On PostgreSQL it runs at read committed with the instance's row
   * locked first (`SELECT ... FOR NO KEY UPDATE`), not serializable: it waits for
   * a concurrent writer of that row instead of conflicting with every
   * transaction that read many instances (placement sums all of them). A
   * serializable writer of the same row still sees the conflict and runs
   * again. Single-writer stores ignore it.
   */
  instance?: string;
  /**
   * What a VM of this host did (its boot, its marks), or what traffic did
   * (a scale-to-zero wake): runtime state, not a user's request. SQLite answers it without waiting for
   * the WAL's fsync (store/sqlite/wal-sync.ts): a `kill -9` of the daemon
   * loses nothing, an OS crash or power loss, which ends the VMs too, may
   * lose it; the next commit of a request writes it out with its own.
   * PostgreSQL ignores it.
   */
  runtime?: boolean;
}

/** One renewal made by `Store.leaseRenewals`: `at` is when it was sent (this thread's `performance.now()`). */
export type LeaseRenewal = { at: number; epoch: number } & ({ ok: boolean } | { error: Error });

/** What `Store.leaseRenewals` renews, how often, and the watchdog's file it keeps. */
export interface LeaseRenewalOptions {
  hostId: string;
  epoch: number;
  leaseMs: number;
  everyMs: number;
  vmsUntil?: { file: string; afterMs: number };
}

/** Renewals running on their own (`Store.leaseRenewals`). */
export interface LeaseRenewals {
  /** the epoch the next renewals name (after the lease was taken again) */
  epoch(epoch: number): void;
  stop(): Promise<void>;
}

export interface Store {
  /** `sqlite` (the embedded default) or `postgres` */
  readonly kind: 'sqlite' | 'postgres';
  /**
   * Runs `fn` in one serializable read-write transaction (one instance's
   * own record: `o.instance`) and returns its result. `fn` must not do I/O other than through `tx`: a transaction that
   * loses a serialization conflict (PostgreSQL) is run again, a bounded
   * number of times. Its changes reach watchers after commit.
   */
  tx<T>(fn: (tx: Tx) => Promise<T>, o?: TxOptions): Promise<T>;
  /**
   * Runs `fn` outside any transaction: each statement sees the latest
   * committed state (what needs one consistent view of several statements,
   * or decides on what it read, uses `tx`). Writes through it are refused.
   */
  read<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * `tx.hosts.renew` on its own (the host lease's renewal,
   * reconcile/host-lease.ts). On PostgreSQL it is one conditional update of
   * one row, in no transaction of its own making: atomic as it is, it needs
   * no serializable snapshot, so it is neither queued behind transactions nor
   * retried on their conflicts. As a serializable transaction it was retried
   * for up to 5 s in bench/hosts' bursts of boots, longer than a 3 s lease.
   */
  renewHostLease(id: string, epoch: number, expiresAt: string): Promise<boolean>;
  /**
   * `renewHostLease` every `everyMs`, run outside the daemon's event loop
   * and pool (PostgreSQL: a worker thread with a connection of its own), so
   * that a daemon busy with a burst of boots still renews on time; each
   * outcome is reported to `on`. Absent: the caller renews from a timer.
   * With `vmsUntil`, each renewal that held also writes, from there, until
   * when this host's VMs may run (its send time + `afterMs`, wall-clock ms)
   * to `file`, the host watchdog's: a daemon whose event loop is busy for
   * seconds does not let its watchdog kill VMs under a lease it holds.
   */
  leaseRenewals?(o: LeaseRenewalOptions, on: (r: LeaseRenewal) => void): LeaseRenewals;
  /**
   * A number that changes whenever this process learns that another process
   * committed to the store; caches of what such processes change (tokens,
   * users) compare it before trusting an entry. Cheap enough per request.
   */
  externalVersion(): number;
  /**
   * The change feed: calls `listener` with every change committed after
   * revision `from` (`'now'`: after the last one this process has seen), by
   * any process, in commit order. Returns the unsubscribe function.
   */
  watch(from: number | 'now', listener: (e: FeedEvent) => void): () => void;
  /** The newest revision this process has seen. */
  revision(): number;
  close(): Promise<void>;
}
