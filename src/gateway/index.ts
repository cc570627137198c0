export { Gateway } from './gateway.js';
export { ensureLocalCa, type LocalCa } from './ca.js';
export {
  DEFAULT_LIMITS,
  type Backend,
  type Counter,
  type Counters,
  type GatewayLimits,
  type GatewayOptions,
  type KeyPair,
  type ListenResult,
  type Route,
} from './types.js';
