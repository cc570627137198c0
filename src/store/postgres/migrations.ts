/**
 * Versioned schema migrations of the PostgreSQL store. Each entry runs once,
 * in order, in one transaction, under an advisory lock (two daemons starting
 * together never race); `unihost_schema.version` records the last one
 * applied. Never edit a released migration: append a new one. The schema is
 * the SQLite one's (src/store/sqlite/migrations.ts, at its latest version)
 * in PostgreSQL's types: `seq` columns keep creation order where SQLite uses
 * its rowid, and `events`/`changes` ids come from sequences taken at commit
 * (src/store/postgres/index.ts), so they follow commit order.
 */
export const PG_MIGRATIONS: string[] = [
  /* 1: the schema of SQLite migration 4 */ `
  CREATE TABLE users (
    id text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL UNIQUE,
    developer boolean NOT NULL DEFAULT false,
    created_at text NOT NULL,
    quotas jsonb NOT NULL DEFAULT '{}'
  );
  CREATE TABLE tokens (
    id text PRIMARY KEY,
    user_id text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    secret_hash text NOT NULL,
    created_at text NOT NULL
  );
  CREATE INDEX tokens_user ON tokens(user_id);

  CREATE TABLE hosts (
    id text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL UNIQUE,
    created_at text NOT NULL
  );

  CREATE TABLE service_groups (
    id text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL REFERENCES users(id),
    name text NOT NULL,
    created_at text NOT NULL,
    persistent boolean NOT NULL,
    services jsonb NOT NULL DEFAULT '[]',
    UNIQUE (user_id, name)
  );

  CREATE TABLE certificates (
    id text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL REFERENCES users(id),
    name text NOT NULL,
    created_at text NOT NULL,
    common_name text NOT NULL,
    state text NOT NULL,
    validation_attempt integer NOT NULL DEFAULT 0,
    validation_next text,
    subject text,
    issuer text,
    serial_number text,
    not_before text,
    not_after text,
    message text,
    source text NOT NULL DEFAULT 'acme',
    names jsonb NOT NULL DEFAULT '[]',
    UNIQUE (user_id, name)
  );

  CREATE TABLE domains (
    fqdn text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    group_id text NOT NULL REFERENCES service_groups(id) ON DELETE CASCADE,
    user_id text NOT NULL REFERENCES users(id),
    certificate_id text REFERENCES certificates(id)
  );
  CREATE INDEX domains_group ON domains(group_id);
  CREATE INDEX domains_cert ON domains(certificate_id);

  CREATE TABLE instances (
    id text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL REFERENCES users(id),
    name text NOT NULL,
    created_at text NOT NULL,
    image text NOT NULL,
    image_ref text NOT NULL,
    memory_mb integer NOT NULL,
    args jsonb NOT NULL DEFAULT '[]',
    env jsonb NOT NULL DEFAULT '{}',
    features jsonb NOT NULL DEFAULT '[]',
    restart_policy text NOT NULL,
    desired text NOT NULL,
    service_group_id text REFERENCES service_groups(id),
    private_ip text UNIQUE,
    mac text UNIQUE,
    nic_id text,
    autoscale_group_id text,
    host_id text REFERENCES hosts(id),
    UNIQUE (user_id, name)
  );
  CREATE INDEX instances_user ON instances(user_id);
  CREATE INDEX instances_group ON instances(service_group_id);

  CREATE TABLE instance_status (
    id text PRIMARY KEY REFERENCES instances(id) ON DELETE CASCADE,
    state text NOT NULL,
    stop_request jsonb,
    start_count integer NOT NULL DEFAULT 0,
    started_at text,
    stopped_at text,
    uptime_ms bigint NOT NULL DEFAULT 0,
    boot_time_us bigint,
    stop_reason integer,
    exit_code integer,
    stop_code bigint,
    vmm_start_time_us bigint,
    vmm_load_time_us bigint,
    vmm_ready_time_us bigint,
    net_time_us bigint,
    restart_attempt integer NOT NULL DEFAULT 0,
    restart_next_at text,
    restart_count integer NOT NULL DEFAULT 0,
    runtime jsonb NOT NULL DEFAULT '{}'
  );
  CREATE INDEX instance_status_state ON instance_status(state);

  CREATE TABLE volumes (
    id text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    user_id text NOT NULL REFERENCES users(id),
    name text NOT NULL,
    created_at text NOT NULL,
    size_mb integer NOT NULL,
    state text NOT NULL,
    persistent boolean NOT NULL,
    instance_id text UNIQUE REFERENCES instances(id),
    at text,
    readonly boolean NOT NULL DEFAULT false,
    message text,
    UNIQUE (user_id, name)
  );

  CREATE TABLE autoscale (
    group_id text PRIMARY KEY REFERENCES service_groups(id) ON DELETE CASCADE,
    user_id text NOT NULL REFERENCES users(id),
    enabled boolean NOT NULL,
    min_size integer NOT NULL,
    max_size integer NOT NULL,
    warmup_time_ms bigint NOT NULL,
    cooldown_time_ms bigint NOT NULL,
    master_id text NOT NULL UNIQUE REFERENCES instances(id),
    policies jsonb NOT NULL DEFAULT '[]'
  );

  CREATE TABLE images (
    digest text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    namespace text NOT NULL,
    size_in_bytes bigint NOT NULL,
    initrd boolean NOT NULL,
    args text NOT NULL,
    kernel_args text NOT NULL,
    min_memory_mb integer NOT NULL DEFAULT 0,
    created_at text NOT NULL
  );
  CREATE TABLE tags (
    ref text PRIMARY KEY,
    namespace text NOT NULL,
    digest text NOT NULL REFERENCES images(digest)
  );

  CREATE SEQUENCE event_ids;
  CREATE TABLE events (
    id bigint PRIMARY KEY,
    at text NOT NULL,
    user_id text NOT NULL,
    instance_id text NOT NULL,
    instance_name text NOT NULL,
    group_id text,
    type text NOT NULL,
    from_state text,
    to_state text
  );
  CREATE INDEX events_user ON events(user_id, id);

  CREATE SEQUENCE revisions;
  CREATE TABLE changes (
    rev bigint PRIMARY KEY,
    kind text NOT NULL,
    id text NOT NULL
  );

  CREATE TABLE figures (
    source text PRIMARY KEY,
    at text NOT NULL,
    data jsonb NOT NULL
  );
  `,
  /* 2: SQLite migration 5 (instance tags, annotations, delete lock, hostname; group limits; volume tags, lock, use, source; event stop fields) */ `
  ALTER TABLE instances ADD COLUMN tags jsonb NOT NULL DEFAULT '[]';
  ALTER TABLE instances ADD COLUMN annotations jsonb NOT NULL DEFAULT '{}';
  ALTER TABLE instances ADD COLUMN delete_lock boolean NOT NULL DEFAULT false;
  ALTER TABLE instances ADD COLUMN hostname text;
  ALTER TABLE service_groups ADD COLUMN soft_limit integer;
  ALTER TABLE service_groups ADD COLUMN hard_limit integer;
  ALTER TABLE volumes ADD COLUMN tags jsonb NOT NULL DEFAULT '[]';
  ALTER TABLE volumes ADD COLUMN delete_lock boolean NOT NULL DEFAULT false;
  ALTER TABLE volumes ADD COLUMN used_mb integer;
  ALTER TABLE volumes ADD COLUMN source_id text;
  ALTER TABLE events ADD COLUMN stop_reason integer;
  ALTER TABLE events ADD COLUMN exit_code integer;
  ALTER TABLE events ADD COLUMN stop_code bigint;
  `,
  /* 3: SQLite migration 6 (the OCI registry) */ `
  CREATE TABLE registry_links (
    repo text NOT NULL,
    digest text NOT NULL,
    namespace text NOT NULL,
    size bigint NOT NULL,
    media_type text,
    created_at text NOT NULL,
    PRIMARY KEY (repo, digest)
  );
  CREATE INDEX registry_links_namespace ON registry_links (namespace);
  CREATE TABLE registry_tags (
    repo text NOT NULL,
    tag text NOT NULL,
    digest text NOT NULL,
    PRIMARY KEY (repo, tag)
  );
  `,
  /* 4: SQLite migration 7 (event ids per user) */ `
  ALTER TABLE events ADD COLUMN user_seq bigint;
  UPDATE events e SET user_seq = r.n
    FROM (SELECT id, row_number() OVER (PARTITION BY user_id ORDER BY id) AS n FROM events) r WHERE e.id = r.id;
  CREATE INDEX events_user_seq ON events(user_id, user_seq);
  `,
  /* 5: SQLite migration 8 (memory snapshots, event messages) */ `
  ALTER TABLE instance_status ADD COLUMN snapshot jsonb;
  ALTER TABLE events ADD COLUMN message text;
  `,
  /* 6: SQLite migration 9 (proven uploads) */ `
  ALTER TABLE certificates ADD COLUMN proven boolean NOT NULL DEFAULT false;
  `,
  /* 7: SQLite migration 10 (many hosts) */ `
  ALTER TABLE hosts ADD COLUMN address text;
  ALTER TABLE hosts ADD COLUMN state text NOT NULL DEFAULT 'live';
  ALTER TABLE hosts ADD COLUMN epoch integer NOT NULL DEFAULT 0;
  ALTER TABLE hosts ADD COLUMN holder text;
  ALTER TABLE hosts ADD COLUMN lease_expires_at text;
  ALTER TABLE hosts ADD COLUMN memory_mb integer NOT NULL DEFAULT 0;
  ALTER TABLE hosts ADD COLUMN vcpus integer;
  ALTER TABLE volumes ADD COLUMN host_id text REFERENCES hosts(id);
  CREATE TABLE blob_chunks (digest text NOT NULL, seq integer NOT NULL, data bytea NOT NULL, PRIMARY KEY (digest, seq));
  CREATE TABLE blobs (digest text PRIMARY KEY, size bigint NOT NULL, chunks integer NOT NULL);
  `,
  /* 8: SQLite migration 11 (network slots) */ `
  ALTER TABLE hosts ADD COLUMN net_slot integer;
  `,
  /* 9: SQLite migration 12 (agent ports) */ `
  ALTER TABLE hosts ADD COLUMN agent_port integer;
  `,
  /* 10: SQLite migration 13 (network settings) */ `
  ALTER TABLE hosts ADD COLUMN network text;
  `,
  /* 11: SQLite migration 14 (certificates by common name) */ `
  CREATE INDEX certificates_common_name ON certificates (common_name);
  `,
  /* 12: PostgreSQL only: events are numbered, and changes published, after their commit (index.ts, publish) */ `
  CREATE INDEX events_unnumbered ON events (id) WHERE user_seq IS NULL;
  CREATE TABLE feed_head (rev bigint NOT NULL);
  INSERT INTO feed_head (rev) SELECT coalesce(max(rev), 0) FROM changes;
  `,
];
