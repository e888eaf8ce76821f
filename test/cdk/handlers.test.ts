import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { DEFAULT_STACK_MODULES, handlerOf, writeLambdaAsset } from '../../lib/task-functions';
import { synthTemplate } from './support';

const PYTHON = path.join(__dirname, '..', '..', '.venv', 'bin', 'python');

/** Imports each module in the project venv and prints which handlers are callable. */
const RESOLVE = `
import importlib, json, sys
found = {}
for handler in json.loads(sys.argv[1]):
    module_name, _, function_name = handler.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        found[handler] = f"import failed: {type(error).__name__}: {error}"
        continue
    found[handler] = "ok" if callable(getattr(module, function_name, None)) else f"{module_name} has no function {function_name}"
print(json.dumps(found))
`;

/** Then prints where compactor/contract.py found contract/. */
const CONTRACT_FOUND = `
from compactor import contract
print(contract.directory())
`;

/** Template values such as {"Ref": ...} become placeholder strings, as Lambda would see real values. */
function plainEnvironment(variables: Record<string, unknown>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(variables).map(([key, value]) => [
      key,
      typeof value === 'string' ? value : `${key.toLowerCase()}-from-cfn`,
    ]),
  );
}

test('every function Handler resolves to a callable in the Lambda asset (contract/ beside compactor/), with the stack environment', () => {
  const template = synthTemplate();
  // The stack's own functions; CDK's provider functions (index.handler) are not in the Lambda package.
  const functions = Object.values(template.findResources('AWS::Lambda::Function')).filter((fn) =>
    String(fn.Properties.Handler).startsWith('compactor.handlers.'),
  );
  const handlers = functions.map((fn) => String(fn.Properties.Handler));
  expect(handlers.sort()).toEqual(DEFAULT_STACK_MODULES.map(handlerOf).sort());
  expect(handlers).toHaveLength(17); // issue #10: + resolve_batch, summarize_batch, sweep
  // The union of every function's environment (start_from_tag adds STATE_MACHINE_ARN).
  const environment = plainEnvironment(
    Object.assign({}, ...functions.map((fn) => fn.Properties.Environment.Variables)),
  );
  environment.STATE_MACHINE_ARN = 'arn:aws:states:us-east-1:111122223333:stateMachine:Test';
  // The asset as Lambda gets it: the handlers import from its root, the contract is read from it.
  const asset = fs.mkdtempSync(path.join(os.tmpdir(), 'lambda-asset-'));
  writeLambdaAsset(asset);
  const result = spawnSync(PYTHON, ['-c', RESOLVE + CONTRACT_FOUND, JSON.stringify(handlers)], {
    cwd: asset,
    env: {
      PATH: process.env.PATH,
      PYTHONPATH: asset,
      AWS_DEFAULT_REGION: 'us-east-1',
      POWERTOOLS_TRACE_DISABLED: 'true',
      ...environment,
    },
    encoding: 'utf8',
  });
  fs.rmSync(asset, { recursive: true, force: true });
  if (result.status !== 0) throw new Error(`python failed (${result.status}): ${result.stderr}`);
  const [found, contractDir] = result.stdout.trim().split('\n');
  expect(JSON.parse(found)).toEqual(Object.fromEntries(handlers.map((handler) => [handler, 'ok'])));
  expect(contractDir).toBe(path.join(asset, 'contract'));
});
