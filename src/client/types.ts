/**
 * Request and reply types of the API client. Requests reuse the parameter
 * types the services declare; replies are the OpenAPI document's response
 * schemas (src/api/schemas and the route files): what the document says
 * is what the client reads.
 * Type-only imports: the client loads no server code at run time.
 */
import type { AutoscaleStatus, GroupStatus } from '../api/schemas/group-responses.js';
import type { InstanceState, PolicyRec, VolumeState } from '../store/types.js';
import type { Static } from '@sinclair/typebox';
import type {
  GroupSummary as GroupSummarySchema,
  InstanceCreated as InstanceCreatedSchema,
  InstanceDeleted as InstanceDeletedSchema,
  InstanceLog,
  InstanceReached,
  InstanceStateChange,
  InstanceStatus,
} from '../api/schemas/instance-responses.js';
import type { Listed, UpdateResult as UpdateResultSchema } from '../api/schemas/common.js';
import type { VolumeStatus } from '../api/schemas/volume-responses.js';
import type { CertificateStatus } from '../api/schemas/certificate-responses.js';
import type { InstanceEvent as InstanceEventSchema } from '../api/schemas/event-responses.js';
import type { Image as ImageSchema } from '../api/routes/images.js';
import type { Quotas as QuotasSchema } from '../api/routes/users.js';
import type { InstanceHistory } from '../api/routes/updates.js';

export type { AutoscaleIn } from '../services/autoscale.js';
export type { GroupDescription } from '../services/groups.js';
export type { CreateParams } from '../services/instances-create.js';
export type { AttachIn } from '../services/volumes.js';
export type { PolicyIn } from '../domain/steps.js';
export type { InstanceState, VolumeState };

/** An object named by UUID or by name. */
export type Ref = { uuid: string; name?: undefined } | { name: string; uuid?: undefined };

/** An entry of a `/list` reply (and what several calls answer: the object's uuid and name). */
export type Summary = Omit<Static<typeof Listed>, 'status'>;

/** A public name of a group, with its certificate's state for a custom one. */
export type Domain = GroupSummary['domains'][number];

/** A service group as instance and create answers show it. */
export type GroupSummary = Static<typeof GroupSummarySchema>;

/** GET /v1/instances entry (the API spec's Instance object): the OpenAPI document's schema. */
export type Instance = Omit<Static<typeof InstanceStatus>, 'status'>;

/** POST /v1/instances entry. */
export type CreatedInstance = Omit<Static<typeof InstanceCreatedSchema>, 'status'>;

export type StartResult = Omit<Static<typeof InstanceStateChange>, 'status'>;
export type StopResult = StartResult;
export type InstanceDeleted = Omit<Static<typeof InstanceDeletedSchema>, 'status'>;
export type WaitResult = Omit<Static<typeof InstanceReached>, 'status'>;
/** GET /v1/instances/log entry: `output` is base64; ranges are inclusive. */
export type LogChunk = Omit<Static<typeof InstanceLog>, 'status'>;

export type ServiceGroup = Omit<Static<typeof GroupStatus>, 'status'>;
/** GET autoscale: the configuration, or `{status: 'unconfigured', uuid, name}`. */
export type Autoscale = Static<typeof AutoscaleStatus>;
export type Policy = PolicyRec;

/** GET /v1/volumes entry: the OpenAPI document's schema. */
export type Volume = Omit<Static<typeof VolumeStatus>, 'status'>;

/** GET /v1/certificates entry: the OpenAPI document's schema. */
export type Certificate = Omit<Static<typeof CertificateStatus>, 'status'>;

/** GET /v1/images/list entry: the OpenAPI document's schema. */
export type Image = Omit<Static<typeof ImageSchema>, 'status'>;

/** GET /v1/users/quotas entry: the OpenAPI document's schema. */
export type Quotas = Omit<Static<typeof QuotasSchema>, 'status'>;

/** One event of `GET /v1/events` (docs/api.md, "Events"): the OpenAPI document's schema. */
export type InstanceEvent = Static<typeof InstanceEventSchema>;

/** One update (PATCH): a property, an operation and its value (docs/api.md, "Updates"). */
export interface UpdateIn {
  prop: string;
  op: 'set' | 'add' | 'del';
  value?: unknown;
}

/** PATCH entry: the object, the client's `id` echoed, and what changed in words. */
export type UpdateResult = Omit<Static<typeof UpdateResultSchema>, 'status'>;

/** GET /v1/instances/history entry: the OpenAPI document's schema. */
export type History = Omit<Static<typeof InstanceHistory>, 'status'>;
/** One entry of an instance's history. */
export type HistoryEntry = History['history'][number];
