import { Type, type TSchema } from '@sinclair/typebox';

/** Marks a string schema as an object name: checked with checkName and lower-cased. */
export const NAME_FORMAT = 'uh-name';
export const POLICY_NAME_FORMAT = 'uh-policy-name';

export const Name = (description = 'Object name (RFC 1035 labels, at most 121 characters).') =>
  Type.String({ format: NAME_FORMAT, description });
export const PolicyName = () =>
  Type.String({ format: POLICY_NAME_FORMAT, description: 'Policy name (Name rules, at most 31 characters).' });
export const Uuid = (description = 'Object UUID.') => Type.String({ format: 'uuid', description });
export const Int = (description?: string, extra: object = {}) =>
  Type.Integer({ ...(description ? { description } : {}), ...extra });
export const Bool = (description?: string) => Type.Boolean(description ? { description } : {});
export const Str = (description?: string, extra: object = {}) =>
  Type.String({ ...(description ? { description } : {}), ...extra });
export const Opt = <T extends TSchema>(s: T) => Type.Optional(s);
/** A closed object of an answer: every field named, nothing else allowed. */
export const closed = <T extends Record<string, TSchema>>(props: T, description: string) =>
  Type.Object(props, { additionalProperties: false, description });

/** `{uuid}` or `{name}`: a reference to another object (exactly one is checked by the service). */
export const Ref = (what: string) =>
  Type.Object(
    { uuid: Opt(Uuid(`UUID of the ${what}.`)), name: Opt(Name(`Name of the ${what}.`)) },
    { additionalProperties: false, description: `Reference to a ${what} by uuid or name.` },
  );

/** Timeout in milliseconds; -1 selects the largest possible value. */
export const TimeoutMs = (description: string) => Type.Integer({ minimum: -1, description });

/** Timeout in seconds (newer clients), an alias of a `_ms` timeout that must not come with it. */
export const TimeoutS = (msKey: string) =>
  Opt(Int(`Alias of ${msKey} in seconds (newer clients); not together with it.`, { minimum: -1 }));

/** An entry of a `/list` answer: the object's uuid and name (with `status` where the endpoint adds it). */
export const Listed = Type.Object(
  { status: Opt(Type.Literal('success')), uuid: Uuid(), name: Str() },
  { additionalProperties: false, description: 'An object of a list.' },
);

/** A response entry of a call on one object: its per-entry `status`, `uuid` and `name`, and what the endpoint adds. */
export const Summary = Type.Object({ status: Str(), uuid: Uuid(), name: Str() }, { additionalProperties: true });

/**
 * The parameters of an update in the newer API's form (`PATCH`): the
 * property (one of `props`), the operation and its value; `id` is the
 * client's, echoed in the answer (docs/api.md, "Updates").
 */
export const UpdateParams = (props: readonly string[]) =>
  Type.Object(
    {
      prop: Type.Union(
        props.map((p) => Type.Literal(p)),
        { errorMessage: `expected one of ${props.join(', ')}`, description: 'The property to change.' },
      ),
      op: Type.Union(
        ['set', 'add', 'del'].map((o) => Type.Literal(o)),
        { errorMessage: 'expected one of set, add, del', description: 'set replaces, add adds to, del removes from.' },
      ),
      value: Opt(Type.Unknown({ description: "The value; its type is the property's (docs/api.md)." })),
      id: Opt(Str("The client's id for this update, echoed in its answer.", { maxLength: 128 })),
    },
    { additionalProperties: false },
  );

/** The answer to one update: the object and, in words, what changed and when it applies. */
export const UpdateResult = Type.Object(
  { status: Str(), uuid: Uuid(), name: Str(), id: Opt(Str()), message: Opt(Str()) },
  { additionalProperties: false },
);
