import { err } from '../errors.js';

/** Which object an entry targets, after validation (names lower-cased): the API hands it to the services. */
export type Target = { uuid: string; name?: undefined } | { name: string; uuid?: undefined };

/** A reference to another object inside a request body: `{uuid}` or `{name}`. */
export interface Ref {
  uuid?: string;
  name?: string;
}

/**
 * Checks that a reference names exactly one of `uuid` and `name` (the same
 * rule as for targets) and returns it as a target. `what` names the
 * parameter in the error, e.g. `attach_to`.
 */
export function refTarget(ref: Ref, what: string): { uuid: string } | { name: string } {
  if (ref.uuid !== undefined && ref.name !== undefined)
    throw err('UH_NOT_BOTH', `${what}: give either 'uuid' or 'name', not both`);
  if (ref.uuid !== undefined) return { uuid: ref.uuid.toLowerCase() };
  if (ref.name !== undefined) return { name: ref.name };
  throw err('UH_MISSING_ID', `${what}: 'uuid' or 'name' is required`);
}
