import { Type } from '@sinclair/typebox';
import { Bool, Int, Opt, Str, Uuid, closed } from './common.js';

/**
 * Response entries of the volume endpoints (closed: every field named;
 * test/api/responses.test.ts checks real answers against them).
 */

const State = () =>
  Type.Union(
    ['uninitialized', 'initializing', 'available', 'idle', 'mounted', 'busy', 'error', 'template'].map((s) =>
      Type.Literal(s),
    ),
    { description: 'Volume state.' },
  );

/** GET /v1/volumes: the volume (without details: uuid, name, state; in the list form without `status`). */
export const VolumeStatus = closed(
  {
    status: Opt(Type.Literal('success')),
    uuid: Uuid(),
    name: Str(),
    state: State(),
    size_mb: Opt(Int()),
    attached_to: Opt(Type.Array(closed({ uuid: Uuid() }, 'The instance it is attached to.'))),
    persistent: Opt(Bool()),
    created_at: Opt(Type.String({ format: 'date-time' })),
    quota_policy: Opt(Type.Literal('static')),
    tags: Opt(Type.Array(Str())),
    delete_lock: Opt(Bool()),
    free_mb: Opt(Int('Free space the file system reports, MB.')),
    filesystem: Opt(Type.Literal('ext4')),
    message: Opt(Str('Why the volume is in error.')),
  },
  'A volume (GET /v1/volumes).',
);

/** POST /v1/volumes. */
export const VolumeCreated = closed(
  { status: Type.Literal('success'), uuid: Uuid(), name: Str(), state: State() },
  'A created volume.',
);

/** DELETE, attach, detach. */
export const VolumeChanged = closed(
  { status: Type.Literal('success'), uuid: Uuid(), name: Str() },
  'The volume the call changed.',
);
