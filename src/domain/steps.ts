import { err } from '../errors.js';
import type { PolicyRec, StepRec } from '../store/types.js';

export interface StepIn {
  lower_bound?: number | null;
  upper_bound?: number | null;
  adjustment: number;
}

export interface PolicyIn {
  name: string;
  /**
   * `step` (the spec's wire value; the default), or the official SDK's form:
   * the policy itself as an object (`{name, metric, adjustment_type, steps}`)
   */
  type?: string | Omit<PolicyIn, 'type'>;
  enabled?: boolean;
  metric?: string;
  adjustment_type?: string;
  steps?: StepIn[];
}

const ADJUSTMENT: Record<string, PolicyRec['adjustment_type']> = {
  change: 'change',
  exact: 'exact',
  absolute: 'exact',
  percent: 'percent',
  percentage: 'percent',
};

const rule = (n: number, msg: string) => err('UH_INVALID', `step rule ${n}: ${msg}`);

/** Checks one step alone: rules 1, 2 and 6. */
function checkStep(s: StepIn, i: number): StepRec {
  const lo = s.lower_bound ?? null;
  const hi = s.upper_bound ?? null;
  if (lo === null && hi === null) {
    // Rule 2 speaks of explicit nulls, rule 6 of bounds left unspecified.
    if (s.lower_bound === null && s.upper_bound === null)
      throw rule(2, `steps[${i}]: lower_bound and upper_bound must not both be null`);
    throw rule(6, `steps[${i}]: only one of lower_bound and upper_bound may be null or unspecified`);
  }
  if (lo !== null && hi !== null && lo >= hi)
    throw rule(1, `steps[${i}]: lower_bound (${lo}) must be smaller than upper_bound (${hi})`);
  return { lower_bound: lo, upper_bound: hi, adjustment: s.adjustment };
}

/** Checks two neighbouring steps: rules 4 (sorted), 3 (no overlap) and 5 (no gap). */
function checkPair(prev: StepRec, cur: StepRec, i: number): void {
  const pair = `steps[${i - 1}] and steps[${i}]`;
  const lowOf = (s: StepRec) => s.lower_bound ?? -Infinity;
  if (lowOf(cur) < lowOf(prev)) throw rule(4, `steps[${i}]: steps must be sorted ascending`);
  if (prev.upper_bound === null || lowOf(cur) < prev.upper_bound) throw rule(3, `${pair} overlap`);
  if (lowOf(cur) > prev.upper_bound) {
    throw rule(5, `${pair} leave a gap between ${prev.upper_bound} and ${cur.lower_bound}`);
  }
}

/**
 * The six step rules of the API spec's autoscale policy. Throws UH_INVALID
 * naming the rule and the step index.
 */
export function checkSteps(steps: StepIn[]): StepRec[] {
  if (steps.length === 0) throw err('UH_INVALID', 'steps: at least one step is required');
  const out = steps.map(checkStep);
  for (let i = 1; i < out.length; i++) checkPair(out[i - 1]!, out[i]!, i);
  return out;
}

/** Validates a policy and normalizes its wire aliases. */
export function checkPolicy(given: PolicyIn): PolicyRec {
  // the SDK sends `{name, type: {name, metric, adjustment_type, steps}}`: the policy is the object
  const p =
    typeof given.type === 'object' && given.type !== null ? { ...given.type, name: given.name, type: 'step' } : given;
  const type = p.type ?? 'step';
  if (type !== 'step')
    throw err('UH_INVALID', `policy '${p.name}': type '${String(type)}' is not supported (supported: step)`);
  const metric = p.metric ?? 'cpu';
  if (metric !== 'cpu')
    throw err('UH_INVALID', `policy '${p.name}': metric '${metric}' is not supported (supported: cpu)`);
  const adj = ADJUSTMENT[p.adjustment_type ?? 'change'];
  if (!adj) {
    throw err(
      'UH_INVALID',
      `policy '${p.name}': adjustment_type '${p.adjustment_type}' is not one of change, exact, percent`,
    );
  }
  if (!Array.isArray(p.steps) || p.steps.length === 0)
    throw err('UH_INVALID', `policy '${p.name}': 'steps' is required (at least one step)`);
  const steps = checkSteps(p.steps);
  // An exact adjustment is a target instance count: a negative one means nothing.
  const negative = steps.findIndex((s) => s.adjustment < 0);
  if (adj === 'exact' && negative >= 0) {
    throw err(
      'UH_INVALID',
      `policy '${p.name}': steps[${negative}]: an exact adjustment is an instance count and must not be negative`,
    );
  }
  return { name: p.name, type: 'step', enabled: p.enabled ?? true, metric: 'cpu', adjustment_type: adj, steps };
}

/** The step of `policy` whose [lower, upper) interval holds `value`, if any. */
export function matchStep(policy: PolicyRec, value: number): StepRec | undefined {
  return policy.steps.find(
    (s) => (s.lower_bound === null || value >= s.lower_bound) && (s.upper_bound === null || value < s.upper_bound),
  );
}
