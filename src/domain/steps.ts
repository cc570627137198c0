import { err } from '../errors.js';
import type { PolicyRec, StepRec } from '../store/types.js';

export interface StepIn {
  lower_bound?: number | null;
  upper_bound?: number | null;
  adjustment: number;
}

export interface PolicyIn {
  name: string;
  type: string;
  metric?: string;
  adjustment_type?: string;
  steps: StepIn[];
}

const ADJUSTMENT: Record<string, PolicyRec['adjustment_type']> = {
  change: 'change',
  exact: 'exact',
  absolute: 'exact',
  percent: 'percent',
  percentage: 'percent',
};

/**
 * The six step rules of api-v1.md (Autoscale policy). Throws UH_INVALID
 * naming the rule and the step index.
 */
export function checkSteps(steps: StepIn[]): StepRec[] {
  if (steps.length === 0) throw err('UH_INVALID', 'steps: at least one step is required');
  const out = steps.map((s, i): StepRec => {
    const lo = s.lower_bound ?? null;
    const hi = s.upper_bound ?? null;
    if (lo === null && hi === null) throw err('UH_INVALID', `steps[${i}]: lower_bound and upper_bound must not both be null`);
    if (lo !== null && hi !== null && lo >= hi) {
      throw err('UH_INVALID', `steps[${i}]: lower_bound (${lo}) must be smaller than upper_bound (${hi})`);
    }
    return { lower_bound: lo, upper_bound: hi, adjustment: s.adjustment };
  });
  for (let i = 1; i < out.length; i++) {
    const prev = out[i - 1]!;
    const cur = out[i]!;
    if (prev.upper_bound === null || cur.lower_bound === null) {
      throw err('UH_INVALID', `steps[${i - 1}] and steps[${i}] overlap: only the first step may be unbounded below and only the last unbounded above`);
    }
    if (prev.lower_bound !== null && cur.lower_bound < prev.lower_bound) {
      throw err('UH_INVALID', `steps[${i}]: steps must be sorted ascending`);
    }
    if (cur.lower_bound < prev.upper_bound) throw err('UH_INVALID', `steps[${i - 1}] and steps[${i}] overlap`);
    if (cur.lower_bound > prev.upper_bound) {
      throw err('UH_INVALID', `steps[${i - 1}] and steps[${i}] leave a gap between ${prev.upper_bound} and ${cur.lower_bound}`);
    }
  }
  return out;
}

/** Validates a policy and normalizes its wire aliases. */
export function checkPolicy(p: PolicyIn): PolicyRec {
  if (p.type !== 'step') throw err('UH_INVALID', `policy '${p.name}': type '${p.type}' is not supported (supported: step)`);
  const metric = p.metric ?? 'cpu';
  if (metric !== 'cpu') throw err('UH_INVALID', `policy '${p.name}': metric '${metric}' is not supported (supported: cpu)`);
  const adj = ADJUSTMENT[p.adjustment_type ?? 'change'];
  if (!adj) {
    throw err('UH_INVALID', `policy '${p.name}': adjustment_type '${p.adjustment_type}' is not one of change, exact, percent`);
  }
  return { name: p.name, type: 'step', enabled: true, metric: 'cpu', adjustment_type: adj, steps: checkSteps(p.steps) };
}

/** The step of `policy` whose [lower, upper) interval holds `value`, if any. */
export function matchStep(policy: PolicyRec, value: number): StepRec | undefined {
  return policy.steps.find(
    (s) => (s.lower_bound === null || value >= s.lower_bound) && (s.upper_bound === null || value < s.upper_bound),
  );
}
