import type { Command } from 'commander';
import { loadConfig, type Config } from '../../config.js';
import { restrictFileModes } from '../../file-modes.js';
import type { createServices } from '../../services/index.js';
import type { Hard, Limits } from '../../store/types.js';
import { registerInstallService } from './service.js';
import { registerBackup } from './backup.js';
import { registerHosts } from './hosts.js';

interface GlobalOpts {
  dataDir?: string;
  config?: string;
  store?: string;
}

/**
 * Opens the daemon's store directly, as the daemon's settings name it
 * (`--store`, `UNIHOST_STORE`, `store.url`; SQLite's WAL and PostgreSQL
 * both allow this while daemons run: they see the change on their feed).
 */
export async function withServices<T>(
  o: GlobalOpts,
  fn: (s: ReturnType<typeof createServices>, c: Config) => Promise<T>,
): Promise<T> {
  const config = loadConfig({ dataDir: o.dataDir, config: o.config, ...(o.store ? { store: { url: o.store } } : {}) });
  // The store may be created here (first import before the first start): same modes as the daemon's.
  restrictFileModes(config.dataDir);
  // loaded here, not at the top: client commands start faster without the store's modules
  const { createServices } = await import('../../services/index.js');
  const { pathsFor } = await import('../../paths.js');
  const { openStore } = await import('../../store/open.js');
  const store = await openStore(config.store.url, pathsFor(config.dataDir).db);
  try {
    return await fn(createServices(config, store), config);
  } finally {
    await store.close();
  }
}

const HARD_KEYS: (keyof Hard)[] = [
  'instances',
  'live_instances',
  'live_memory_mb',
  'service_groups',
  'services',
  'volumes',
  'total_volume_mb',
  'registry_mb',
  'domains',
  'certificates',
  'snapshot_mb',
];
const LIMIT_KEYS: (keyof Limits)[] = [
  'min_memory_mb',
  'max_memory_mb',
  'min_volume_mb',
  'max_volume_mb',
  'min_autoscale_size',
  'max_autoscale_size',
];

function parseQuotaArgs(pairs: string[]): { hard: Partial<Hard>; limits: Partial<Limits> } {
  const hard: Partial<Hard> = {};
  const limits: Partial<Limits> = {};
  for (const p of pairs) {
    const m = /^([a-z_]+)=(\d+)$/.exec(p);
    if (!m) throw new Error(`'${p}' is not KEY=NUMBER`);
    const [, k, v] = m as unknown as [string, string, string];
    if ((HARD_KEYS as string[]).includes(k)) hard[k as keyof Hard] = Number(v);
    else if ((LIMIT_KEYS as string[]).includes(k)) limits[k as keyof Limits] = Number(v);
    else throw new Error(`unknown quota '${k}' (known: ${[...HARD_KEYS, ...LIMIT_KEYS].join(', ')})`);
  }
  return { hard, limits };
}

export function registerAdmin(program: Command): void {
  const admin = program
    .command('admin')
    .description('administer users, tokens, quotas, hosts and backups (works on the data dir directly)')
    .option('--data-dir <dir>', 'data directory (env UNIHOST_DATA_DIR)')
    .option('--store <url>', 'the store: postgresql://USER@HOST/DB (env UNIHOST_STORE; default SQLite in the data dir)')
    .option('--config <file>', 'JSON config file (env UNIHOST_CONFIG)');
  const user = admin.command('user').description('manage users');
  user
    .command('create <name>')
    .description('create a user and print its bearer token (shown once)')
    .option('--developer', 'grant developer permission (vmm_* and net_time_us fields)')
    .option('--quiet', 'print only the token')
    .action(async (name: string, o: { developer?: boolean; quiet?: boolean }) => {
      await withServices(admin.opts(), async (s) => {
        const { user: u, token } = await s.users.create(name, o.developer ?? false);
        if (o.quiet) console.log(token);
        else
          console.log(
            `created user '${u.name}' (${u.id})${u.developer ? ' with developer permission' : ''}\ntoken: ${token}\n\nexport UKC_TOKEN=${token}`,
          );
      });
    });
  registerTokens(user, admin);
  registerInstallService(admin);
  registerBackup(admin);
  registerHosts(admin, withServices);
  user
    .command('list')
    .description('list users')
    .action(async () => {
      await withServices(admin.opts(), async (s) => {
        for (const u of await s.users.list()) console.log(`${u.name}\t${u.id}\t${u.developer ? 'developer' : ''}`);
      });
    });
  user
    .command('quotas <name> [KEY=VALUE...]')
    .description("show a user's quotas, or set some (e.g. live_instances=32 max_memory_mb=4096)")
    .action(async (name: string, pairs: string[]) => {
      await withServices(admin.opts(), async (s) => {
        const over = parseQuotaArgs(pairs);
        const u =
          pairs.length > 0
            ? await s.users.setQuotas(name, over)
            : (await s.users.list()).find((x) => x.name === name.toLowerCase());
        if (!u) throw new Error(`no user '${name}'`);
        console.log(JSON.stringify(await s.users.quotas(u), null, 2));
      });
    });
}

/** `admin user token [new] NAME`, `token list NAME`, `token revoke NAME (--all | TOKEN-ID)`. */
function registerTokens(user: Command, admin: Command): void {
  const token = user.command('token').description('issue (token NAME), list or revoke bearer tokens');
  token
    .command('new <name>', { isDefault: true })
    .description('issue another bearer token for a user (the default: `token NAME`)')
    .action(async (name: string) => {
      await withServices(admin.opts(), async (s) => {
        const { token: secret, id } = await s.users.newToken(name);
        console.log(secret);
        // stderr: scripts capture the token alone from stdout
        console.error(`token id: ${id} (revoke with: unihost admin user token revoke ${name} ${id})`);
      });
    });
  token
    .command('list <name>')
    .description("list a user's token ids (oldest first)")
    .action(async (name: string) => {
      await withServices(admin.opts(), async (s) => {
        for (const t of await s.users.tokens(name)) console.log(`${t.id}\t${t.created_at}`);
      });
    });
  token
    .command('revoke <name> [token-id]')
    .description('revoke one token (by id, see `token list`) or --all; the API answers 401 to it at once')
    .option('--all', 'revoke every token of the user')
    .action(async (name: string, id: string | undefined, o: { all?: boolean }) => {
      if (!o.all === !id) throw new Error('give a token id or --all (not both)');
      await withServices(admin.opts(), async (s) => {
        const gone = await s.users.revokeTokens(name, o.all ? { all: true } : { id: id! });
        console.log(
          `revoked ${gone.length} token(s) of '${name.toLowerCase()}'${gone.length ? `: ${gone.join(', ')}` : ''}`,
        );
      });
    });
}
