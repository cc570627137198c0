export { HaproxyDataPlane } from './haproxy/plane.js';
export { ensureLocalCa, type LocalCa } from './ca.js';
export { Departures } from './departures.js';
export {
  DEFAULT_LIMITS,
  type Backend,
  type Counter,
  type Counters,
  type DataPlane,
  type GatewayLimits,
  type GatewayOptions,
  type KeyPair,
  type ListenResult,
  type Route,
} from './types.js';
