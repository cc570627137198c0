import type { PolicyRec, StepRec } from '../store/types.js';
import { matchStep } from './steps.js';

/** One policy whose step matched the metric, and the instance count it asks for. */
export interface Applied {
  policy: string;
  step: StepRec;
  target: number;
}

export interface Decision {
  /** instance count to reach (equals `current` when nothing applies or the clamp keeps it) */
  target: number;
  /** the policies that matched; empty → the count is kept */
  applied: Applied[];
}

/**
 * A percent change of `current`: rounded toward zero, but never to 0 when the
 * exact value is not 0 (between 0 and 1 → 1, between -1 and 0 → -1), as the
 * public service does.
 */
export function percentChange(current: number, percent: number): number {
  const exact = (current * percent) / 100;
  const t = Math.trunc(exact);
  if (t === 0 && exact !== 0) return exact > 0 ? 1 : -1;
  return t === 0 ? 0 : t; // no -0
}

/** The instance count one step asks for, before the clamp. */
export function stepTarget(type: PolicyRec['adjustment_type'], adjustment: number, current: number): number {
  switch (type) {
    case 'exact':
      return adjustment;
    case 'percent':
      return current + percentChange(current, adjustment);
    case 'change':
      return current + adjustment;
  }
}

export function clamp(n: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, n));
}

/**
 * One evaluation: every enabled policy is run against `metric`; each one
 * whose step holds the value (lower bound inclusive, upper exclusive) asks
 * for a count. When several ask, the largest count wins (as in AWS step
 * scaling: availability first). The result is clamped to [min, max]; when
 * no policy applies the count is kept as it is.
 */
export function decide(
  policies: PolicyRec[],
  metric: number,
  current: number,
  size: { min: number; max: number },
): Decision {
  const applied: Applied[] = [];
  for (const p of policies) {
    if (!p.enabled || p.metric !== 'cpu') continue;
    const step = matchStep(p, metric);
    if (step) applied.push({ policy: p.name, step, target: stepTarget(p.adjustment_type, step.adjustment, current) });
  }
  if (applied.length === 0) return { target: current, applied };
  const wanted = Math.max(...applied.map((a) => a.target));
  return { target: clamp(wanted, size.min, size.max), applied };
}

/** Average of the values, or undefined for none. */
export function average(values: number[]): number | undefined {
  if (values.length === 0) return undefined;
  return values.reduce((a, b) => a + b, 0) / values.length;
}
