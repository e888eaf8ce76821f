// Payload templates and reference paths (JSONPath) as Step Functions evaluates them, for the
// parts of a state the twin's own handlers evaluate (Distributed Map's ItemSelector, ResultWriter
// Parameters, MaxConcurrencyPath, ToleratedFailure*Path). aws-local-stepfunctions does this for the
// states it runs itself but does not export its evaluator.
import { JSONPath } from 'jsonpath-plus';

export class StatesError extends Error {
  /** An error a state fails with: name = the Error, message = the Cause (as the library reads them). */
  constructor(name, cause) {
    super(cause);
    this.name = name;
  }
}

/** The value at a path: `$...` in `input`, `$$...` in the context object. */
export function atPath(path, input, context) {
  if (typeof path !== 'string' || !path.startsWith('$')) {
    throw new StatesError('States.Runtime', `${JSON.stringify(path)} is not a path`);
  }
  if (path.startsWith('States.')) {
    throw new StatesError('States.Runtime', `the twin does not evaluate intrinsic functions here: ${path}`);
  }
  const [json, expr] = path.startsWith('$$') ? [context, path.slice(1)] : [input, path];
  const found = JSONPath({ path: expr, json, wrap: true });
  if (found.length === 0) {
    throw new StatesError(
      'States.Runtime',
      `the JSONPath '${path}' could not be found in the input '${JSON.stringify(json)}'`,
    );
  }
  // A definite path yields one value; an indefinite one ([*], ..) a list, as in Step Functions.
  const definite = !/\[\*\]|\.\.|\[\?|\[.*[,:].*\]/.test(expr);
  return definite ? found[0] : found;
}

/** A payload template: every key ending in `.$` replaced by the value of its path. */
export function payload(template, input, context) {
  if (Array.isArray(template)) return template.map((v) => payload(v, input, context));
  if (template === null || typeof template !== 'object') return template;
  const out = {};
  for (const [key, value] of Object.entries(template)) {
    if (key.endsWith('.$')) {
      out[key.slice(0, -2)] = atPath(value, input, context);
    } else {
      out[key] = payload(value, input, context);
    }
  }
  return out;
}
