import type { Command } from 'commander';
import { createInterface } from 'node:readline/promises';
import { request } from 'undici';
import { ConnectionError } from '../client/errors.js';
import { baseUrlOf, DEFAULT_METRO, profilePath, readProfiles, TOKEN_VARS, writeProfiles } from '../client/config.js';
import { examples } from './shared/context.js';
import { UsageError } from './shared/exit.js';

/** The token: the flag, a token variable, or one line read from stdin (a prompt on a terminal). */
async function readToken(flag: string | undefined): Promise<string> {
  if (flag) return flag;
  const env = TOKEN_VARS.map((k) => process.env[k]).find((v) => v !== undefined && v !== '');
  if (env) return env;
  const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: process.stdin.isTTY });
  try {
    return (await rl.question(process.stdin.isTTY ? 'API token: ' : '')).trim();
  } finally {
    rl.close();
  }
}

export function registerLogin(program: Command): void {
  const cmd = program
    .command('login')
    .description('check an API token against a metro and save both as a profile (the profile file is mode 0600)')
    .option('--metro <url>', `API base URL or host:port (env UKC_METRO; default ${DEFAULT_METRO})`)
    .option('--token <token>', 'the token (default: UKC_TOKEN and the like, else read from stdin)')
    .option('--profile <name>', 'profile name to save under', 'default')
    .action(async (o: { metro?: string; token?: string; profile: string }) => {
      const metro = o.metro ?? process.env.UKC_METRO ?? DEFAULT_METRO;
      const base = baseUrlOf(metro);
      const token = await readToken(o.token);
      if (!token) throw new UsageError('no token given: pass --token, set UKC_TOKEN, or type it when asked');
      let status: number;
      try {
        const r = await request(`${base}/v1/users/quotas`, { headers: { authorization: `Bearer ${token}` } });
        status = r.statusCode;
        await r.body.dump();
      } catch (e) {
        throw new ConnectionError(base, (e as Error).message);
      }
      if (status === 401) throw new UsageError(`${base} refused the token (HTTP 401): nothing saved`);
      if (status !== 200) throw new Error(`${base} answered HTTP ${status} to the token check: nothing saved`);
      const path = profilePath();
      const file = readProfiles(path);
      file.profiles[o.profile] = { metro: base, token };
      file.current = o.profile;
      writeProfiles(path, file);
      const user = Buffer.from(token, 'base64').toString('utf8').split(':')[0];
      console.log(
        `logged in to ${base}${user ? ` as ${user}` : ''}; profile '${o.profile}' saved in ${path} (mode 0600)`,
      );
    });
  examples(cmd, [
    'unihost login --metro http://127.0.0.1:7878 --token "$UKC_TOKEN"',
    'unihost login --profile prod < token.txt',
  ]);
}
