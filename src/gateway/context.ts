import type { Logger } from 'pino';
import type { Balancer } from './balancer.js';
import type { Stats } from './stats.js';
import type { GatewayLimits } from './types.js';
import type { Upstreams } from './upstreams.js';

/** What the listeners and proxies share; built once by the Gateway. */
export interface Ctx {
  limits: GatewayLimits;
  balancer: Balancer;
  stats: Stats;
  upstreams: Upstreams;
  log: Logger;
  acmeChallenge?: (host: string, token: string) => string | undefined;
}
