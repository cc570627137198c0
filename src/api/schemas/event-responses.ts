import { Type } from '@sinclair/typebox';
import { Int, Opt, Str, Uuid } from './common.js';

/** One event of `GET /v1/events` (the `data:` line of each server-sent event; docs/api.md, "Events"). */
export const InstanceEvent = Type.Object(
  {
    id: Int("The event's id in the user's own numbering (the SSE id)."),
    at: Type.String({ format: 'date-time' }),
    type: Type.Union(['created', 'state', 'deleted', 'notice'].map((t) => Type.Literal(t))),
    instance: Type.Object({ uuid: Uuid(), name: Str() }, { additionalProperties: false }),
    service_group: Opt(Type.Object({ uuid: Uuid() }, { additionalProperties: false })),
    from_state: Opt(Str('state: the state before.')),
    to_state: Opt(Str('state: the state after.')),
    message: Opt(Str('notice: what the platform did or could not do.')),
  },
  { additionalProperties: false, description: 'An instance event.' },
);

/** The query of `GET /v1/events`. */
export const EventsQuery = {
  from: Str('Replay every event after this id (0: the whole log); or the Last-Event-ID header.'),
  instance: Str('Only events of this instance (uuid, or the name it had then).'),
  group: Str('Only events of instances of this service group (uuid or name; it must exist).'),
};
