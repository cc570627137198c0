import type { Command } from 'commander';
import { addClientOptions } from '../shared/context.js';
import { registerInstanceCreate } from './create.js';
import { registerInstanceDelete } from './delete.js';
import { registerInstanceGet } from './get.js';
import { registerInstanceList } from './list.js';
import { registerInstanceLogs } from './logs.js';
import { registerInstanceStart } from './start.js';
import { registerInstanceStop, registerInstanceSuspend } from './stop.js';
import { registerInstanceWait } from './wait.js';
import { registerInstanceUpdate } from './update.js';
import { registerInstanceHistory } from './history.js';
import { registerInstanceCheckpoint, registerInstanceTemplate } from './template.js';

/** `unihost instance ...`: instances through the API (like `kraft cloud instance`). */
export function registerInstance(program: Command): void {
  const instance = addClientOptions(
    program.command('instance').alias('instances').description('create, inspect, follow and stop instances'),
  );
  registerInstanceCreate(instance);
  registerInstanceList(instance);
  registerInstanceGet(instance);
  registerInstanceLogs(instance);
  registerInstanceStart(instance);
  registerInstanceStop(instance);
  registerInstanceSuspend(instance);
  registerInstanceTemplate(instance);
  registerInstanceCheckpoint(instance);
  registerInstanceWait(instance);
  registerInstanceUpdate(instance);
  registerInstanceHistory(instance);
  registerInstanceDelete(instance);
}
