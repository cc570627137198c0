import type { Command } from 'commander';
import { addClientOptions } from '../shared/context.js';
import { registerServiceCreate } from './create.js';
import { registerServiceDelete } from './delete.js';
import { registerServiceGet } from './get.js';
import { registerServiceList } from './list.js';
import { registerServiceUpdate } from './update.js';

/** `unihost service ...`: service groups (published ports and domains). */
export function registerService(program: Command): void {
  const service = addClientOptions(
    program.command('service').alias('services').description('manage service groups (published ports, domains)'),
  );
  registerServiceCreate(service);
  registerServiceList(service);
  registerServiceGet(service);
  registerServiceUpdate(service);
  registerServiceDelete(service);
}
