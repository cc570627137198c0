import { certificateEndpoints } from './certificates.js';
import { imageEndpoints, imageStoreEndpoints } from './images.js';
import { nodeEndpoints, notHereEndpoints } from './nodes.js';
import { instanceEndpoints } from './instances.js';
import { instanceSnapshotEndpoints } from './instance-snapshots.js';
import { serviceEndpoints } from './services.js';
import { userEndpoints } from './users.js';
import { volumeEndpoints } from './volumes.js';
import { updateEndpoints } from './updates.js';
import { volumeTemplateEndpoints } from './volume-templates.js';

/** The endpoint table: every route of the v1 API. */
export const ENDPOINTS = [
  ...serviceEndpoints,
  ...instanceEndpoints,
  ...instanceSnapshotEndpoints,
  ...volumeTemplateEndpoints,
  ...volumeEndpoints,
  ...updateEndpoints,
  ...certificateEndpoints,
  ...imageEndpoints,
  ...imageStoreEndpoints,
  ...nodeEndpoints,
  ...notHereEndpoints,
  ...userEndpoints,
];
