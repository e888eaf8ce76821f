import * as path from 'path';
import { Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';

/** One Lambda per workflow task; the handler is `compactor.handlers.<module>.handler` (docs/contract.md). */
export const TASK_MODULES = [
  'prepare',
  'launch',
  'check_instance',
  'start_compaction',
  'check_compaction',
  'create_snapshots',
  'check_snapshots',
  'register_image',
  'enable_fast_snapshot_restore',
  'teardown',
  'report',
] as const;
export type TaskModule = (typeof TASK_MODULES)[number];

export const LAMBDAS_DIR = path.join(__dirname, '..', 'lambdas');
export const POWERTOOLS_LAYER_PARAMETER = '/aws/service/powertools/python/x86_64/python3.13/latest';

/** Launch tries many pools and teardown waits on several API calls; the others are single calls. */
const TIMEOUTS: Partial<Record<TaskModule, Duration>> = {
  launch: Duration.minutes(5),
  teardown: Duration.minutes(2),
  prepare: Duration.minutes(2),
};

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
    timeout: TIMEOUTS[module] ?? Duration.minutes(1),
    tracing: lambda.Tracing.ACTIVE,
    logGroup,
    loggingFormat: lambda.LoggingFormat.JSON,
  });
}

/** Every task function of docs/contract.md; tests and the twin find them by their Handler. */
export class TaskFunctions extends Construct {
  public readonly functions: Record<TaskModule, lambda.Function>;

  constructor(scope: Construct, id: string, props: TaskFunctionsProps) {
    super(scope, id);
    const layerArn =
      props.powertoolsLayerArn ??
      ssm.StringParameter.valueForStringParameter(this, POWERTOOLS_LAYER_PARAMETER);
    const shared: TaskFunctionShared = {
      code: lambda.Code.fromAsset(LAMBDAS_DIR, { exclude: LAMBDA_ASSET_EXCLUDES }),
      powertools: lambda.LayerVersion.fromLayerVersionArn(this, 'Powertools', layerArn),
      role: props.role,
      logRetention: props.logRetention,
      environment: {
        ...props.environment,
        POWERTOOLS_SERVICE_NAME: 'ebs-snapshot-compactor',
        POWERTOOLS_METRICS_NAMESPACE: 'EbsSnapshotCompactor',
        LOG_LEVEL: 'INFO',
      },
    };
    this.functions = Object.fromEntries(
      TASK_MODULES.map((module) => [module, createTaskFunction(this, module, shared)]),
    ) as Record<TaskModule, lambda.Function>;
  }

  /** ARNs of the functions' log groups (ending in :*), for the role's logging statement. */
  get logGroupArns(): string[] {
    return Object.values(this.functions).map((fn) => fn.logGroup.logGroupArn);
  }
}
