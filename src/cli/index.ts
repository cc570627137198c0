import { Command, CommanderError } from 'commander';
import { registerAdmin } from './admin/users.js';
import { registerImage } from './image/index.js';
import { registerServe } from './serve.js';

export function buildCli(): Command {
  const program = new Command('unihost')
    .description('unihost: a self-hostable unikernel hosting platform')
    .version('0.1.0')
    .showHelpAfterError();
  registerServe(program);
  registerAdmin(program);
  registerImage(program);
  return program;
}

export async function main(argv = process.argv): Promise<void> {
  try {
    await buildCli().parseAsync(argv);
  } catch (e) {
    if (e instanceof CommanderError) process.exit(e.exitCode);
    console.error(`unihost: ${(e as Error).message}`);
    process.exit(1);
  }
}
