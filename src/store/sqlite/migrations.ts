/**
 * Versioned schema migrations. Each entry runs once, in order, inside a
 * transaction; `PRAGMA user_version` records the last one applied. Never
 * edit a released migration: append a new one.
 */
export const MIGRATIONS: string[] = [
  /* 1: initial schema */ `
  CREATE TABLE users (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    developer INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    quotas TEXT NOT NULL DEFAULT '{}'
  );
  CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    secret_hash TEXT NOT NULL,
    created_at TEXT NOT NULL
  );
  CREATE INDEX tokens_user ON tokens(user_id);

  CREATE TABLE service_groups (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    persistent INTEGER NOT NULL,
    services TEXT NOT NULL DEFAULT '[]',
    UNIQUE (user_id, name)
  );

  CREATE TABLE certificates (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    common_name TEXT NOT NULL,
    state TEXT NOT NULL,
    validation_attempt INTEGER NOT NULL DEFAULT 0,
    validation_next TEXT,
    subject TEXT,
    issuer TEXT,
    serial_number TEXT,
    not_before TEXT,
    not_after TEXT,
    message TEXT,
    UNIQUE (user_id, name)
  );

  CREATE TABLE domains (
    fqdn TEXT PRIMARY KEY,
    group_id TEXT NOT NULL REFERENCES service_groups(id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users(id),
    certificate_id TEXT REFERENCES certificates(id)
  );
  CREATE INDEX domains_group ON domains(group_id);
  CREATE INDEX domains_cert ON domains(certificate_id);

  CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    image TEXT NOT NULL,
    image_ref TEXT NOT NULL,
    memory_mb INTEGER NOT NULL,
    args TEXT NOT NULL DEFAULT '[]',
    env TEXT NOT NULL DEFAULT '{}',
    features TEXT NOT NULL DEFAULT '[]',
    restart_policy TEXT NOT NULL,
    state TEXT NOT NULL,
    desired TEXT NOT NULL,
    stop_request TEXT,
    start_count INTEGER NOT NULL DEFAULT 0,
    started_at TEXT,
    stopped_at TEXT,
    uptime_ms INTEGER NOT NULL DEFAULT 0,
    boot_time_us INTEGER,
    stop_reason INTEGER,
    exit_code INTEGER,
    stop_code INTEGER,
    vmm_start_time_us INTEGER,
    vmm_load_time_us INTEGER,
    vmm_ready_time_us INTEGER,
    net_time_us INTEGER,
    restart_attempt INTEGER NOT NULL DEFAULT 0,
    restart_next_at TEXT,
    restart_count INTEGER NOT NULL DEFAULT 0,
    service_group_id TEXT REFERENCES service_groups(id),
    private_ip TEXT UNIQUE,
    mac TEXT UNIQUE,
    nic_id TEXT,
    autoscale_group_id TEXT,
    runtime TEXT NOT NULL DEFAULT '{}',
    UNIQUE (user_id, name)
  );
  CREATE INDEX instances_user ON instances(user_id);
  CREATE INDEX instances_group ON instances(service_group_id);

  CREATE TABLE volumes (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    size_mb INTEGER NOT NULL,
    state TEXT NOT NULL,
    persistent INTEGER NOT NULL,
    instance_id TEXT UNIQUE REFERENCES instances(id),
    at TEXT,
    readonly INTEGER NOT NULL DEFAULT 0,
    message TEXT,
    UNIQUE (user_id, name)
  );

  CREATE TABLE autoscale (
    group_id TEXT PRIMARY KEY REFERENCES service_groups(id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users(id),
    enabled INTEGER NOT NULL,
    min_size INTEGER NOT NULL,
    max_size INTEGER NOT NULL,
    warmup_time_ms INTEGER NOT NULL,
    cooldown_time_ms INTEGER NOT NULL,
    master_id TEXT NOT NULL UNIQUE REFERENCES instances(id),
    policies TEXT NOT NULL DEFAULT '[]'
  );

  CREATE TABLE images (
    digest TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    size_in_bytes INTEGER NOT NULL,
    initrd INTEGER NOT NULL,
    args TEXT NOT NULL,
    kernel_args TEXT NOT NULL,
    min_memory_mb INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
  );
  CREATE TABLE tags (
    ref TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    digest TEXT NOT NULL REFERENCES images(digest)
  );
  `,
  /*
   * 2: the durable log of instance state changes (GET /v1/events). Triggers
   * append in the same transaction as the change, whichever code makes it
   * (API services, reconcilers), so the log cannot miss or invent one.
   */ `
  CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    user_id TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    instance_name TEXT NOT NULL,
    group_id TEXT,
    type TEXT NOT NULL,
    from_state TEXT,
    to_state TEXT
  );
  CREATE INDEX events_user ON events(user_id, id);

  CREATE TRIGGER events_instance_created AFTER INSERT ON instances BEGIN
    INSERT INTO events (user_id, instance_id, instance_name, group_id, type, to_state)
    VALUES (NEW.user_id, NEW.id, NEW.name, NEW.service_group_id, 'created', NEW.state);
  END;
  CREATE TRIGGER events_instance_state AFTER UPDATE OF state ON instances WHEN OLD.state IS NOT NEW.state BEGIN
    INSERT INTO events (user_id, instance_id, instance_name, group_id, type, from_state, to_state)
    VALUES (NEW.user_id, NEW.id, NEW.name, NEW.service_group_id, 'state', OLD.state, NEW.state);
  END;
  CREATE TRIGGER events_instance_deleted AFTER DELETE ON instances BEGIN
    INSERT INTO events (user_id, instance_id, instance_name, group_id, type, from_state)
    VALUES (OLD.user_id, OLD.id, OLD.name, OLD.service_group_id, 'deleted', OLD.state);
  END;
  `,
  /* 3: certificates: where they come from and every name they cover (the key is a file, see src/certs/files.ts) */ `
  ALTER TABLE certificates ADD COLUMN source TEXT NOT NULL DEFAULT 'acme';
  ALTER TABLE certificates ADD COLUMN names TEXT NOT NULL DEFAULT '[]';
  `,
  /*
   * 4: the state boundary (docs/architecture.md, "Store"). The instance is
   * split into its spec (what the user asked; services write it) and its
   * status (what the host observes; the reconcilers write it, `state` only
   * through the state table); `host_id` places it. The change feed: every
   * commit appends its changes to `changes`, whose revisions watchers follow.
   * The store itself appends instance events (with the state change, in the
   * same transaction), so the triggers go. `figures`: live figures (CPU,
   * gateway counters) one process publishes for API servers elsewhere.
   */ `
  DROP TRIGGER events_instance_created;
  DROP TRIGGER events_instance_state;
  DROP TRIGGER events_instance_deleted;

  CREATE TABLE hosts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
  );

  CREATE TABLE instance_status (
    id TEXT PRIMARY KEY REFERENCES instances(id) ON DELETE CASCADE,
    state TEXT NOT NULL,
    stop_request TEXT,
    start_count INTEGER NOT NULL DEFAULT 0,
    started_at TEXT,
    stopped_at TEXT,
    uptime_ms INTEGER NOT NULL DEFAULT 0,
    boot_time_us INTEGER,
    stop_reason INTEGER,
    exit_code INTEGER,
    stop_code INTEGER,
    vmm_start_time_us INTEGER,
    vmm_load_time_us INTEGER,
    vmm_ready_time_us INTEGER,
    net_time_us INTEGER,
    restart_attempt INTEGER NOT NULL DEFAULT 0,
    restart_next_at TEXT,
    restart_count INTEGER NOT NULL DEFAULT 0,
    runtime TEXT NOT NULL DEFAULT '{}'
  );
  INSERT INTO instance_status SELECT id, state, stop_request, start_count, started_at, stopped_at, uptime_ms,
    boot_time_us, stop_reason, exit_code, stop_code, vmm_start_time_us, vmm_load_time_us, vmm_ready_time_us,
    net_time_us, restart_attempt, restart_next_at, restart_count, runtime FROM instances;
  CREATE INDEX instance_status_state ON instance_status(state);
  ALTER TABLE instances DROP COLUMN state;
  ALTER TABLE instances DROP COLUMN stop_request;
  ALTER TABLE instances DROP COLUMN start_count;
  ALTER TABLE instances DROP COLUMN started_at;
  ALTER TABLE instances DROP COLUMN stopped_at;
  ALTER TABLE instances DROP COLUMN uptime_ms;
  ALTER TABLE instances DROP COLUMN boot_time_us;
  ALTER TABLE instances DROP COLUMN stop_reason;
  ALTER TABLE instances DROP COLUMN exit_code;
  ALTER TABLE instances DROP COLUMN stop_code;
  ALTER TABLE instances DROP COLUMN vmm_start_time_us;
  ALTER TABLE instances DROP COLUMN vmm_load_time_us;
  ALTER TABLE instances DROP COLUMN vmm_ready_time_us;
  ALTER TABLE instances DROP COLUMN net_time_us;
  ALTER TABLE instances DROP COLUMN restart_attempt;
  ALTER TABLE instances DROP COLUMN restart_next_at;
  ALTER TABLE instances DROP COLUMN restart_count;
  ALTER TABLE instances DROP COLUMN runtime;
  -- placed on the daemon's own host when it next starts (one host for now)
  ALTER TABLE instances ADD COLUMN host_id TEXT REFERENCES hosts(id);

  CREATE TABLE changes (
    rev INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    id TEXT NOT NULL
  );

  -- live figures a process publishes for the others (not announced on the feed)
  CREATE TABLE figures (
    source TEXT PRIMARY KEY,
    at TEXT NOT NULL,
    data TEXT NOT NULL
  );
  `,
  /*
   * 5: what the newer API updates (PATCH): an instance's tags, annotations,
   * delete lock and hostname; a group's soft and hard limits; a volume's
   * tags, delete lock, measured use and the volume it is cloned from (and
   * the `template` state); the stop fields on the events into stopped or
   * standby (instance history).
   */ `
  ALTER TABLE instances ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
  ALTER TABLE instances ADD COLUMN annotations TEXT NOT NULL DEFAULT '{}';
  ALTER TABLE instances ADD COLUMN delete_lock INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE instances ADD COLUMN hostname TEXT;
  ALTER TABLE service_groups ADD COLUMN soft_limit INTEGER;
  ALTER TABLE service_groups ADD COLUMN hard_limit INTEGER;
  ALTER TABLE volumes ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
  ALTER TABLE volumes ADD COLUMN delete_lock INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE volumes ADD COLUMN used_mb INTEGER;
  ALTER TABLE volumes ADD COLUMN source_id TEXT;
  ALTER TABLE events ADD COLUMN stop_reason INTEGER;
  ALTER TABLE events ADD COLUMN exit_code INTEGER;
  ALTER TABLE events ADD COLUMN stop_code INTEGER;
  `,
  /* 6: the OCI registry (src/registry/): content each repository holds, and its tags */ `
  CREATE TABLE registry_links (
    repo TEXT NOT NULL,
    digest TEXT NOT NULL,
    namespace TEXT NOT NULL,
    size INTEGER NOT NULL,
    media_type TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (repo, digest)
  );
  CREATE INDEX registry_links_namespace ON registry_links (namespace);
  CREATE TABLE registry_tags (
    repo TEXT NOT NULL,
    tag TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (repo, tag)
  );
  `,
  /*
   * 7: event ids per user (issue 26: a global id told every tenant how busy the platform is):
   * `user_seq` numbers each user's events 1, 2, 3 ...; it is the id clients see and resume from.
   */ `
  ALTER TABLE events ADD COLUMN user_seq INTEGER;
  UPDATE events SET user_seq = (SELECT count(*) FROM events e2 WHERE e2.user_id = events.user_id AND e2.id <= events.id);
  CREATE INDEX events_user_seq ON events(user_id, user_seq);
  `,
  /* 8: memory snapshots (issue 25: stateful standby, suspend), and events that carry a message */ `
  ALTER TABLE instance_status ADD COLUMN snapshot TEXT;
  ALTER TABLE events ADD COLUMN message TEXT;
  `,
  /* 9: uploaded certificates claim their names only with a chain to a trusted root (issue 26) */ `
  ALTER TABLE certificates ADD COLUMN proven INTEGER NOT NULL DEFAULT 0;
  `,
  /* 10: many hosts (issue 22): a host's lease and epoch, its state and budgets; the host a volume's file is on */ `
  ALTER TABLE hosts ADD COLUMN address TEXT;
  ALTER TABLE hosts ADD COLUMN state TEXT NOT NULL DEFAULT 'live';
  ALTER TABLE hosts ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE hosts ADD COLUMN holder TEXT;
  ALTER TABLE hosts ADD COLUMN lease_expires_at TEXT;
  ALTER TABLE hosts ADD COLUMN memory_mb INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE hosts ADD COLUMN vcpus INTEGER;
  ALTER TABLE volumes ADD COLUMN host_id TEXT REFERENCES hosts(id);
  -- image content other hosts fetch by digest (src/images/share.ts)
  CREATE TABLE blob_chunks (digest TEXT NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (digest, seq));
  CREATE TABLE blobs (digest TEXT PRIMARY KEY, size INTEGER NOT NULL, chunks INTEGER NOT NULL);
  `,
  /* 11: many hosts (issue 22): each host's slot on the private network (its gateway address and bridge MAC) */ `
  ALTER TABLE hosts ADD COLUMN net_slot INTEGER;
  `,
  /* 12: many hosts (issue 22): the port where an agent serves its instances' console logs to API servers */ `
  ALTER TABLE hosts ADD COLUMN agent_port INTEGER;
  `,
  /* 13: many hosts (issue 22): each host's private network settings, which every live host must share */ `
  ALTER TABLE hosts ADD COLUMN network TEXT;
  `,
  /* 14: a domain claim looks up the certificates of one name, not all of them (issue 26) */ `
  CREATE INDEX certificates_common_name ON certificates (common_name);
  `,
];
