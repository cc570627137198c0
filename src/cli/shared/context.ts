import type { Command } from 'commander';
import { UnihostClient } from '../../client/index.js';
import { parseFormat, render, type Format } from './output.js';

interface GlobalOpts {
  metro?: string;
  token?: string;
  profile?: string;
  output?: string;
}

/** Adds the options every API command takes (on the noun: `unihost instance --metro X list` also works). */
export function addClientOptions(cmd: Command): Command {
  return cmd
    .option('--metro <url>', 'API base URL or host:port (env UKC_METRO; default http://127.0.0.1:7878)')
    .option('--token <token>', 'bearer token (env UKC_TOKEN, KRAFTCLOUD_TOKEN, KC_TOKEN, UNIKRAFTCLOUD_TOKEN)')
    .option('--profile <name>', 'profile of the profile file (env UNIHOST_PROFILE; default its current one)')
    .option('-o, --output <format>', 'output format: table, json or yaml', 'table');
}

/** What a leaf command works with: the API client and the output format. */
export interface CommandCtx {
  client: UnihostClient;
  format: Format;
  /** prints `data` as JSON/YAML, or `human()` for tables */
  print(data: unknown, human: () => string): void;
}

/** The client and output format of a leaf command, from its options and its parents'. */
export function ctxOf(cmd: Command): CommandCtx {
  const o = cmd.optsWithGlobals<GlobalOpts>();
  const format = parseFormat(o.output);
  const client = UnihostClient.from({ metro: o.metro, token: o.token, profile: o.profile });
  return {
    client,
    format,
    print(data, human) {
      const s = render(format, data, human);
      if (s !== '') console.log(s);
    },
  };
}

/** Appends an Examples section to a command's help. */
export function examples(cmd: Command, lines: string[]): Command {
  return cmd.addHelpText('after', `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`);
}
