import { certificateEndpoints } from './certificates.js';
import { imageEndpoints } from './images.js';
import { instanceEndpoints } from './instances.js';
import { serviceEndpoints } from './services.js';
import { userEndpoints } from './users.js';
import { volumeEndpoints } from './volumes.js';

/** The endpoint table: every route of the v1 API. */
export const ENDPOINTS = [
  ...serviceEndpoints,
  ...instanceEndpoints,
  ...volumeEndpoints,
  ...certificateEndpoints,
  ...imageEndpoints,
  ...userEndpoints,
];
