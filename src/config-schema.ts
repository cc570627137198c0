/**
 * The configuration file's schema (docs/operations.md, "Configuration"):
 * every key the daemon knows, with its type; anything else is refused at
 * start with its path, instead of being cast and ignored. Every key is
 * optional in the file: what it leaves out keeps the embedded default.
 */
import { Type, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

const Int = (min = 0, max = Number.MAX_SAFE_INTEGER) => Type.Integer({ minimum: min, maximum: max });
const Obj = <P extends Record<string, TSchema>>(props: P) =>
  Type.Partial(Type.Object(props, { additionalProperties: false }));
const OneOf = (...values: string[]) => Type.Union(values.map((v) => Type.Literal(v)));

const Hard = Obj({
  instances: Int(),
  live_instances: Int(),
  live_memory_mb: Int(),
  service_groups: Int(),
  services: Int(),
  volumes: Int(),
  total_volume_mb: Int(),
  registry_mb: Int(),
  domains: Int(),
  certificates: Int(),
  snapshot_mb: Int(),
});
const Limits = Obj({
  min_memory_mb: Int(),
  max_memory_mb: Int(),
  min_volume_mb: Int(),
  max_volume_mb: Int(),
  min_autoscale_size: Int(),
  max_autoscale_size: Int(),
});

export const ConfigFileSchema = Obj({
  listen: Type.String(),
  tls: Obj({ cert: Type.String(), key: Type.String() }),
  dataDir: Type.String({ minLength: 1 }),
  metro: Type.String({ minLength: 1 }),
  metroDomain: Type.String({ minLength: 1 }),
  reservedLabels: Type.Array(Type.String()),
  bodyLimit: Int(1),
  maxTimeoutMs: Int(1),
  maxWaitsPerUser: Int(1),
  rateLimit: Obj({ max: Int(), windowMs: Int(1) }),
  authFailures: Obj({ max: Int(), windowMs: Int(1) }),
  eventStreams: Obj({ perUser: Int(1), retentionDays: Int(1) }),
  capacity: Obj({
    memoryMb: Int(),
    memoryFraction: Type.Number({ exclusiveMinimum: 0, maximum: 1 }),
    vmOverheadMb: Int(),
    vcpusPerCore: Type.Number({ minimum: 0 }),
    cores: Int(),
  }),
  maxLogChunk: Int(1),
  subnet: Type.String(),
  defaultQuotas: Obj({ hard: Hard, limits: Limits }),
  logLevel: OneOf('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'),
  log: Obj({ file: Type.String(), maxSizeMb: Int(1), keep: Int(0) }),
  machines: Obj({
    driver: Type.String(),
    accel: OneOf('auto', 'kvm', 'tcg'),
    qemu: Type.String({ minLength: 1 }),
    tbSizeMb: Int(1),
    bootTimeoutMs: Int(1),
    stopTimeoutMs: Int(1),
    ksm: Type.Boolean(),
    warmVms: Int(0, 64),
  }),
  network: Obj({
    enabled: Type.Boolean(),
    driver: Type.String(),
    bridge: Type.String({ minLength: 1, maxLength: 15 }),
    dns: Type.Boolean(),
    dnsPort: Int(1, 65535),
    vni: Int(1, 0xffffff),
  }),
  volumes: Obj({ driver: Type.String() }),
  gateway: Obj({
    enabled: Type.Boolean(),
    driver: Type.String(),
    wake: Obj({ timeoutMs: Int(1), maxHeldPerGroup: Int(1) }),
    listen: Type.String(),
    portOffset: Type.Integer({ minimum: -1, maximum: 65535 }),
    threads: Type.Integer({ minimum: 0, maximum: 64 }),
    cpuWeight: Type.Integer({ minimum: 0, maximum: 10_000 }),
    logErrors: Type.Boolean(),
    allowedPorts: Type.Array(Type.String({ pattern: '^[0-9]{1,5}(-[0-9]{1,5})?$' }), { maxItems: 256 }),
  }),
  acme: Obj({
    enabled: Type.Boolean(),
    directory: Type.String(),
    directoryCa: Type.String(),
    uploadTrustedCa: Type.String(),
    email: Type.String(),
    maxAttempts: Int(1),
    retryBaseMs: Int(1),
    retryMaxMs: Int(1),
  }),
  domainProof: Obj({
    enabled: Type.Boolean(),
    dnsServers: Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 8 }),
    timeoutMs: Int(100, 30_000),
  }),
  store: Obj({ url: Type.String(), resyncMs: Int(100) }),
  roles: Type.Array(OneOf('api', 'agent', 'gateway'), { minItems: 1, uniqueItems: true }),
  host: Obj({
    name: Type.String({ minLength: 1, maxLength: 63, pattern: '^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$' }),
    address: Type.String({ maxLength: 45 }),
    leaseMs: Type.Integer({ minimum: 1000, maximum: 600_000 }),
    watchdog: OneOf('auto', 'on', 'off'),
    agentPort: Int(0, 65535),
  }),
});

/**
 * Checks a parsed configuration file; throws naming every problem with its
 * path (`machines.accel: must be one of auto, kvm, tcg`) and `source` (the file).
 */
export function checkConfigFile(value: unknown, source: string): void {
  if (Value.Check(ConfigFileSchema, value)) return;
  const problems = [...Value.Errors(ConfigFileSchema, value)]
    .map((e) => describe(e.path, e.message, e.schema, e.value))
    // one line per path: a union's alternatives each report the same value
    .filter((line, i, all) => all.findIndex((l) => l.split(':')[0] === line.split(':')[0]) === i)
    .slice(0, 10);
  throw new Error(`config file ${source} is not valid:\n  ${problems.join('\n  ')}`);
}

function describe(path: string, message: string, schema: TSchema, value: unknown): string {
  const at = path.replace(/^\//, '').replaceAll('/', '.') || '(top)';
  if (/unexpected property|additional propert/i.test(message)) return `${at}: unknown key (known: ${knownKeys(path)})`;
  if ((schema as { anyOf?: TSchema[] }).anyOf?.every((s) => (s as { const?: unknown }).const !== undefined))
    return `${at}: ${JSON.stringify(value)} is not one of ${(schema as unknown as { anyOf: { const: unknown }[] }).anyOf.map((s) => s.const).join(', ')}`;
  return `${at}: ${message.toLowerCase()} (got ${JSON.stringify(value)})`;
}

/** The keys the schema knows beside the unknown one at `path` (`/machines/acel` → machines' keys). */
function knownKeys(path: string): string {
  let node: TSchema = ConfigFileSchema;
  for (const part of path.split('/').filter(Boolean).slice(0, -1)) {
    const next = (node as { properties?: Record<string, TSchema> }).properties?.[part];
    if (!next) break;
    node = next;
  }
  return Object.keys((node as { properties?: Record<string, TSchema> }).properties ?? {}).join(', ');
}
