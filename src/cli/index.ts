import { Command } from 'commander';
import { registerAdmin } from './admin/users.js';
import { registerCert } from './cert/index.js';
import { registerCompletion } from './completion.js';
import { registerDoctor } from './doctor.js';
import { registerEvents } from './events/index.js';
import { registerImage } from './image/index.js';
import { registerInstance } from './instance/index.js';
import { registerLogin } from './login.js';
import { registerQuota } from './quota/index.js';
import { registerScale } from './scale/index.js';
import { registerServe } from './serve.js';
import { registerService } from './service/index.js';
import { registerVolume } from './volume/index.js';
import { describeError } from './shared/exit.js';

export function buildCli(): Command {
  const program = new Command('unihost')
    .description('unihost: a self-hostable unikernel hosting platform')
    .version('0.1.0')
    .showHelpAfterError()
    // set before the commands are added, so every subcommand inherits them
    .exitOverride()
    .configureHelp({ showGlobalOptions: true });
  registerServe(program);
  registerAdmin(program);
  registerLogin(program);
  registerImage(program);
  registerInstance(program);
  registerService(program);
  registerVolume(program);
  registerScale(program);
  registerCert(program);
  registerQuota(program);
  registerEvents(program);
  registerDoctor(program);
  registerCompletion(program);
  return program;
}

/** Runs the CLI; errors end as lines on stderr and an exit code (src/cli/shared/exit.ts), never a stack trace. */
export async function main(argv = process.argv): Promise<void> {
  try {
    await buildCli().parseAsync(argv);
  } catch (e) {
    const { code, lines } = describeError(e);
    for (const l of lines) console.error(`unihost: ${l}`);
    process.exit(code);
  }
}
