import type { Command } from 'commander';
import { addClientOptions } from '../shared/context.js';
import { registerCertDelete } from './delete.js';
import { registerCertGet } from './get.js';
import { registerCertList } from './list.js';
import { registerCertReplace } from './replace.js';

/** `unihost cert ...`: certificates of custom domains. */
export function registerCert(program: Command): void {
  const cert = addClientOptions(
    program.command('cert').alias('certificate').description('list, inspect, replace and delete TLS certificates'),
  );
  registerCertList(cert);
  registerCertGet(cert);
  registerCertReplace(cert);
  registerCertDelete(cert);
}
