import type { ServiceBase } from './deps.js';

/** The first started controller that has method `key` (the daemon wires them; services only read). */
export function controllerWith<T>(deps: ServiceBase, key: string): T | undefined {
  return deps.controllers?.find((c) => typeof (c as Record<string, unknown>)?.[key] === 'function') as T | undefined;
}
