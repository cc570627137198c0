import { err } from '../errors.js';
import type { Tx, UserRec } from '../store/types.js';

/** The user-scoped lookups every table of named objects has. */
interface Named<T> {
  get(userId: string, id: string): Promise<T | undefined>;
  getByName(userId: string, name: string): Promise<T | undefined>;
}

/**
 * The one lookup of a user's object by target (`{uuid}` or `{name}`): the
 * object, or UH_NOT_FOUND naming what was asked for, so another user's
 * object answers exactly like a missing one.
 */
async function find<T>(table: Named<T>, what: string, user: UserRec, t: { uuid?: string; name?: string }): Promise<T> {
  const found = t.uuid !== undefined ? await table.get(user.id, t.uuid) : await table.getByName(user.id, t.name ?? '');
  if (!found)
    throw err(
      'UH_NOT_FOUND',
      t.uuid !== undefined ? `No ${what} with UUID '${t.uuid}'` : `No ${what} with name '${t.name}'`,
    );
  return found;
}

type T = { uuid?: string; name?: string };
export const findInstance = (tx: Tx, user: UserRec, t: T) => find(tx.instances, 'instance', user, t);
export const findGroup = (tx: Tx, user: UserRec, t: T) => find(tx.groups, 'service group', user, t);
export const findVolume = (tx: Tx, user: UserRec, t: T) => find(tx.volumes, 'volume', user, t);
export const findCertificate = (tx: Tx, user: UserRec, t: T) => find(tx.certificates, 'certificate', user, t);
