import type { Command } from 'commander';
import { addClientOptions } from '../shared/context.js';
import { registerVolumeAttach } from './attach.js';
import { registerVolumeCreate } from './create.js';
import { registerVolumeDelete } from './delete.js';
import { registerVolumeDetach } from './detach.js';
import { registerVolumeGet } from './get.js';
import { registerVolumeList } from './list.js';
import { registerVolumeResize } from './resize.js';
import { registerVolumeClone } from './clone.js';

/** `unihost volume ...`: persistent volumes. */
export function registerVolume(program: Command): void {
  const volume = addClientOptions(program.command('volume').alias('volumes').description('manage persistent volumes'));
  registerVolumeCreate(volume);
  registerVolumeList(volume);
  registerVolumeGet(volume);
  registerVolumeAttach(volume);
  registerVolumeDetach(volume);
  registerVolumeResize(volume);
  registerVolumeClone(volume);
  registerVolumeDelete(volume);
}
