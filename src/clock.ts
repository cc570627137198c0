/** The time source services and controllers read; tests inject a fake one to drive back-off and cooldowns. */
export interface Clock {
  /** milliseconds since the epoch */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
