import * as path from 'path';
import { Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';

/** One Lambda per workflow task; the handler is `compactor.handlers.<module>.handler` (docs/contract.md). */
export const WORKFLOW_TASK_MODULES = [
  'prepare',
  'list_source_blocks',
  'launch',
  'check_instance',
  'attach_volumes',
  'start_compaction',
  'check_compaction',
  'create_snapshots',
  'check_snapshots',
  'register_image',
  'enable_fast_snapshot_restore',
  'teardown',
  'report',
] as const;
export type WorkflowTaskModule = (typeof WORKFLOW_TASK_MODULES)[number];

/** Every function of the stack: the workflow tasks plus the tag rule's target, which starts executions. */
export const TASK_MODULES = [...WORKFLOW_TASK_MODULES, 'start_from_tag'] as const;
export type TaskModule = (typeof TASK_MODULES)[number];

export const LAMBDAS_DIR = path.join(__dirname, '..', 'lambdas');
export const POWERTOOLS_LAYER_PARAMETER = '/aws/service/powertools/python/x86_64/python3.13/latest';

/**
 * Lambda timeout of each function. Launch tries many pools; prepare, attach_volumes and teardown make
 * several API calls per volume; the others are single calls. The cleanup workflow waits past the longest
 * workflow task (longestWorkflowTaskTimeout), so this table is the one place these numbers live.
 */
export const TASK_TIMEOUTS: Record<TaskModule, Duration> = {
  prepare: Duration.minutes(2),
  // lists for at most 60 s (SLICE_SECONDS of compactor/source_blocks.py), then merges and writes the lists
  list_source_blocks: Duration.minutes(3),
  launch: Duration.minutes(5),
  check_instance: Duration.minutes(1),
  attach_volumes: Duration.minutes(2),
  start_compaction: Duration.minutes(1),
  check_compaction: Duration.minutes(1),
  create_snapshots: Duration.minutes(1),
  check_snapshots: Duration.minutes(1),
  register_image: Duration.minutes(1),
  enable_fast_snapshot_restore: Duration.minutes(1),
  teardown: Duration.minutes(2),
  report: Duration.minutes(1),
  start_from_tag: Duration.minutes(1),
};

/** The longest a task of the main workflow can still be running after its execution ended. */
export function longestWorkflowTaskTimeout(): Duration {
  const seconds = Math.max(...WORKFLOW_TASK_MODULES.map((module) => TASK_TIMEOUTS[module].toSeconds()));
  return Duration.seconds(seconds);
}

/** Tests, caches and packaging metadata stay out of the deployed code. */
const LAMBDA_ASSET_EXCLUDES = [
  'tests',
  '**/tests',
  '**/__pycache__',
  '**/*.pyc',
  '**/test_*.py',
  '**/conftest.py',
  '.mypy_cache',
  '.pytest_cache',
  '.ruff_cache',
  '*.md',
  '*.toml',
  '*.cfg',
  '*.txt',
];

/** Powertools' keys, on every function (docs/contract.md, "Lambda environment"). */
export const POWERTOOLS_ENVIRONMENT = {
  POWERTOOLS_SERVICE_NAME: 'ebs-snapshot-compactor',
  POWERTOOLS_METRICS_NAMESPACE: 'EbsSnapshotCompactor',
  LOG_LEVEL: 'INFO',
};

export function handlerOf(module: TaskModule): string {
  return `compactor.handlers.${module}.handler`;
}

export interface TaskFunctionsProps {
  /** The Lambda environment of docs/contract.md, minus the Powertools keys added here. */
  readonly environment: Record<string, string>;
  readonly role: iam.IRole;
  readonly logRetention: logs.RetentionDays;
  /** Undefined = the public Powertools layer resolved at deploy from its SSM parameter. */
  readonly powertoolsLayerArn?: string;
}

/** What every task function shares. */
export interface TaskFunctionShared {
  readonly code: lambda.Code;
  readonly powertools: lambda.ILayerVersion;
  readonly role: iam.IRole;
  readonly environment: Record<string, string>;
  readonly logRetention: logs.RetentionDays;
}

/** The one way a task function is made: Python 3.13, Powertools layer, X-Ray, JSON logs in its own group. */
export function createTaskFunction(
  scope: Construct,
  module: TaskModule,
  shared: TaskFunctionShared,
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
      code: lambda.Code.fromAsset(LAMBDAS_DIR, { exclude: LAMBDA_ASSET_EXCLUDES }),
      powertools: lambda.LayerVersion.fromLayerVersionArn(this, 'Powertools', layerArn),
      role: props.role,
      logRetention: props.logRetention,
      environment: { ...props.environment, ...POWERTOOLS_ENVIRONMENT },
    };
    this.functions = Object.fromEntries(
      WORKFLOW_TASK_MODULES.map((module) => [module, createTaskFunction(this, module, this.shared)]),
    ) as Record<WorkflowTaskModule, lambda.Function>;
  }

  /** ARNs of the functions' log groups (ending in :*), for the role's logging statement. */
  get logGroupArns(): string[] {
    return Object.values(this.functions).map((fn) => fn.logGroup.logGroupArn);
  }
}
