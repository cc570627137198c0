/**
 * Request and reply types of the API client. Requests reuse the parameter
 * types the services declare; replies are the OpenAPI document's response
 * schemas where they are typed (instances, volumes, certificates: src/api/schemas), else
 * the services' return types where they are precise, else spelled out here
 * (image, quotas) until the document types them (issue 24).
 * Type-only imports: the client loads no server code at run time.
 */
import type { AutoscaleService } from '../services/autoscale.js';
import type { GroupService } from '../services/groups.js';
import type { InstanceService } from '../services/instances.js';
import type { InstanceState, PolicyRec, VolumeState } from '../store/types.js';
import type { Static } from '@sinclair/typebox';
import type { InstanceCreated as InstanceCreatedSchema, InstanceStatus } from '../api/schemas/instance-responses.js';
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

type Reply<F extends (...a: never[]) => Promise<unknown>> = Awaited<ReturnType<F>>;

/** An entry of a `/list` reply. */
export interface Summary {
  uuid: string;
  name: string;
}

export interface Domain {
  fqdn: string;
  certificate?: { uuid: string; name: string; state: string };
}

export interface GroupSummary extends Summary {
  domains: Domain[];
}

/** GET /v1/instances entry (the API spec's Instance object): the OpenAPI document's schema. */
export type Instance = Omit<Static<typeof InstanceStatus>, 'status'>;

/** POST /v1/instances entry. */
export type CreatedInstance = Omit<Static<typeof InstanceCreatedSchema>, 'status'>;

export type StartResult = Reply<InstanceService['start']>;
export type StopResult = Reply<InstanceService['stop']>;
export type InstanceDeleted = Reply<InstanceService['delete']>;
export type WaitResult = Reply<InstanceService['wait']>;
/** GET /v1/instances/log entry: `output` is base64; ranges are inclusive. */
export type LogChunk = Reply<InstanceService['log']>;

export type ServiceGroup = Reply<GroupService['get']>;
/** GET autoscale: the configuration, or `{status: 'unconfigured', uuid, name}`. */
export type Autoscale = Reply<AutoscaleService['get']>;
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

export interface UpdateResult extends Summary {
  message?: string;
}

/** GET /v1/instances/history entry: the OpenAPI document's schema. */
export type History = Omit<Static<typeof InstanceHistory>, 'status'>;
/** One entry of an instance's history. */
export type HistoryEntry = History['history'][number];
