import type { Command } from 'commander';
import { addClientOptions } from '../shared/context.js';
import { registerScaleGet } from './get.js';
import { registerScaleInit } from './init.js';
import { registerScaleAddPolicy } from './add-policy.js';
import { registerScaleRemovePolicy } from './remove-policy.js';
import { registerScaleReset } from './reset.js';

/** `unihost scale ...`: autoscale of service groups. */
export function registerScale(program: Command): void {
  const scale = addClientOptions(
    program.command('scale').description('autoscale a service group: configuration and step policies'),
  );
  registerScaleInit(scale);
  registerScaleGet(scale);
  registerScaleReset(scale);
  registerScaleAddPolicy(scale);
  registerScaleRemovePolicy(scale);
}
