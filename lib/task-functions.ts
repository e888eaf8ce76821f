import * as fs from 'fs';
import * as path from 'path';
import { AssetHashType, DockerImage, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';
import contractTasks from '../contract/tasks.json';
import contractEnvironment from '../contract/environment.json';

/** One entry of contract/tasks.json: a Lambda function and the Task states that call it. */
export type ContractTask = (typeof contractTasks.tasks)[number];

/** Every function of the stack, in workflow order (contract/tasks.json). */
export const CONTRACT_TASKS: readonly ContractTask[] = contractTasks.tasks;

/** One Lambda per workflow task; the handler is `compactor.handlers.<module>.handler` (docs/contract.md). */
export const WORKFLOW_TASK_MODULES: readonly string[] = CONTRACT_TASKS.filter((t) => t.workflow).map(
  (t) => t.module,
);
export type WorkflowTaskModule = string;

/** Every function of the stack: the workflow tasks plus the tag rule's target, which starts executions. */
export const TASK_MODULES: readonly string[] = CONTRACT_TASKS.map((t) => t.module);

/** The functions a stack with default settings has: those without `createdWhen` (a setting they need) in tasks.json. */
export const DEFAULT_STACK_MODULES: readonly string[] = CONTRACT_TASKS.filter(
  (t) => !('createdWhen' in t),
).map((t) => t.module);
export type TaskModule = string;

export const REPO_DIR = path.join(__dirname, '..');
export const LAMBDAS_DIR = path.join(REPO_DIR, 'lambdas');
export const CONTRACT_DIR = path.join(REPO_DIR, 'contract');
export const POWERTOOLS_LAYER_PARAMETER = '/aws/service/powertools/python/x86_64/python3.13/latest';

/**
 * Lambda timeout of each function (timeoutSeconds of contract/tasks.json). The cleanup workflow waits
 * past the longest workflow task (longestWorkflowTaskTimeout).
 */
export const TASK_TIMEOUTS: Record<TaskModule, Duration> = Object.fromEntries(
  CONTRACT_TASKS.map((t) => [t.module, Duration.seconds(t.timeoutSeconds)]),
);

/** The longest a task of the main workflow can still be running after its execution ended. */
export function longestWorkflowTaskTimeout(): Duration {
  const seconds = Math.max(...WORKFLOW_TASK_MODULES.map((module) => TASK_TIMEOUTS[module].toSeconds()));
  return Duration.seconds(seconds);
}

/** Tests, caches and packaging metadata stay out of the deployed code (names matched at any depth). */
const ASSET_EXCLUDES = [
  /^tests?$/,
  /^__pycache__$/,
  /\.pyc$/,
  /^test_.*\.py$/,
  /^conftest\.py$/,
  /^\.(mypy|pytest|ruff)_cache$/,
  /\.(md|toml|cfg|txt)$/,
];

/**
 * Writes the Lambda asset into `outputDir`: the package at `compactor/` (the handlers' import root) and
 * the contract it reads at `contract/` beside it (compactor/contract.py looks there first). Plain file
 * copies in a fixed layout: the asset hash is that of the output, so it changes exactly when a shipped
 * file does.
 */
export function writeLambdaAsset(outputDir: string): void {
  const parts: [string, string][] = [
    [path.join(LAMBDAS_DIR, 'compactor'), 'compactor'],
    [CONTRACT_DIR, 'contract'],
  ];
  for (const [from, to] of parts) {
    fs.cpSync(from, path.join(outputDir, to), {
      recursive: true,
      filter: (source) => !ASSET_EXCLUDES.some((pattern) => pattern.test(path.basename(source))),
    });
  }
}

/** The code of every task function: bundled locally (no Docker), see writeLambdaAsset. */
export function lambdaCode(): lambda.Code {
  return lambda.Code.fromAsset(LAMBDAS_DIR, {
    assetHashType: AssetHashType.OUTPUT,
    bundling: {
      // never pulled: the local bundling below always succeeds
      image: DockerImage.fromRegistry('ebs-snapshot-compactor/local-bundling-only'),
      local: {
        tryBundle(outputDir: string): boolean {
          writeLambdaAsset(outputDir);
          return true;
        },
      },
    },
  });
}

/** Powertools' keys, on every function: the contract's keys read by Powertools, with their values. */
export const POWERTOOLS_ENVIRONMENT: Record<string, string> = Object.fromEntries(
  contractEnvironment.variables
    .filter((v) => v.readBy === 'Powertools')
    .map((v) => [v.name, (v as { value?: string }).value ?? '']),
);

/**
 * The keys contract/environment.json gives `functions` (a module; 'workflow': those of any workflow task), minus
 * the Powertools keys that lib/task-functions.ts adds to every function.
 */
export function contractEnvironmentKeys(functions: string): string[] {
  const modules = functions === 'workflow' ? WORKFLOW_TASK_MODULES : [functions];
  return contractEnvironment.variables
    .filter((v) => v.readBy !== 'Powertools' && modules.some((module) => v.functions.includes(module)))
    .map((v) => v.name);
}

/** A workflow task's own environment: its keys of the workflow's `values`, and Powertools'. */
export function taskEnvironment(module: string, values: Record<string, string>): Record<string, string> {
  const keys = contractEnvironmentKeys(module);
  return { ...Object.fromEntries(keys.map((key) => [key, values[key]])), ...POWERTOOLS_ENVIRONMENT };
}

/** Fails the synth when `values` sets a key the contract does not give these functions, or misses one. */
export function checkedEnvironment(
  functions: string,
  values: Record<string, string>,
): Record<string, string> {
  const expected = contractEnvironmentKeys(functions).sort();
  const given = Object.keys(values).sort();
  if (JSON.stringify(expected) !== JSON.stringify(given)) {
    throw new Error(
      `The ${functions} environment sets ${given.join(', ')}; contract/environment.json gives it ${expected.join(', ')}.`,
    );
  }
  return values;
}

export function handlerOf(module: TaskModule): string {
  return `compactor.handlers.${module}.handler`;
}

export interface TaskFunctionsProps {
  /** Every workflow key's value (contract/environment.json); each function gets only its own keys. */
  readonly environment: Record<string, string>;
  /** Each workflow task's own role (lib/task-role.ts TaskRoles). */
  readonly roles: Record<WorkflowTaskModule, iam.IRole>;
  readonly logRetention: logs.RetentionDays;
  /** Undefined = the public Powertools layer resolved at deploy from its SSM parameter. */
  readonly powertoolsLayerArn?: string;
}

/** What every task function shares (each gets an environment of its own). */
export interface TaskFunctionShared {
  readonly code: lambda.Code;
  readonly powertools: lambda.ILayerVersion;
  readonly logRetention: logs.RetentionDays;
}

/** The one way a task function is made: Python 3.13, Powertools layer, X-Ray, JSON logs in its own group. */
export function createTaskFunction(
  scope: Construct,
  module: TaskModule,
  shared: TaskFunctionShared & { readonly role: iam.IRole; readonly environment: Record<string, string> },
): lambda.Function {
  const id = module
    .split('_')
    .map((word) => word[0].toUpperCase() + word.slice(1))
    .join('');
  const logGroup = new logs.LogGroup(scope, `${id}Logs`, {
    retention: shared.logRetention,
    removalPolicy: RemovalPolicy.DESTROY,
  });
  return new lambda.Function(scope, id, {
    description: `ebs-snapshot-compactor task ${module} (${Stack.of(scope).stackName})`,
    runtime: lambda.Runtime.PYTHON_3_13,
    architecture: lambda.Architecture.X86_64,
    handler: handlerOf(module),
    code: shared.code,
    layers: [shared.powertools],
    role: shared.role,
    environment: shared.environment,
    memorySize: 256,
    timeout: TASK_TIMEOUTS[module],
    tracing: lambda.Tracing.ACTIVE,
    logGroup,
    loggingFormat: lambda.LoggingFormat.JSON,
  });
}

/**
 * Every workflow task function of docs/contract.md; tests and the twin find them by their Handler.
 * `shared` lets the triggers make start_from_tag with the same factory (its own role and one more key).
 */
export class TaskFunctions extends Construct {
  public readonly functions: Record<WorkflowTaskModule, lambda.Function>;
  public readonly shared: TaskFunctionShared;

  constructor(scope: Construct, id: string, props: TaskFunctionsProps) {
    super(scope, id);
    const layerArn =
      props.powertoolsLayerArn ??
      ssm.StringParameter.valueForStringParameter(this, POWERTOOLS_LAYER_PARAMETER);
    this.shared = {
      code: lambdaCode(),
      powertools: lambda.LayerVersion.fromLayerVersionArn(this, 'Powertools', layerArn),
      logRetention: props.logRetention,
    };
    this.functions = Object.fromEntries(
      WORKFLOW_TASK_MODULES.map((module) => [
        module,
        createTaskFunction(this, module, {
          ...this.shared,
          role: props.roles[module],
          environment: taskEnvironment(module, props.environment),
        }),
      ]),
    ) as Record<WorkflowTaskModule, lambda.Function>;
  }
}
