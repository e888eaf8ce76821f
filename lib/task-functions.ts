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

/** Creates every task function the same way; tests and the twin find them by their Handler. */
export class TaskFunctions extends Construct {
  public readonly functions: Record<TaskModule, lambda.Function>;
  public readonly logGroups: logs.LogGroup[] = [];

  constructor(scope: Construct, id: string, props: TaskFunctionsProps) {
    super(scope, id);
    const code = lambda.Code.fromAsset(LAMBDAS_DIR, {
      exclude: [
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
      ],
    });
    const layerArn =
      props.powertoolsLayerArn ??
      ssm.StringParameter.valueForStringParameter(this, POWERTOOLS_LAYER_PARAMETER);
    const powertools = lambda.LayerVersion.fromLayerVersionArn(this, 'Powertools', layerArn);
    const environment = {
      ...props.environment,
      POWERTOOLS_SERVICE_NAME: 'ebs-snapshot-compactor',
      POWERTOOLS_METRICS_NAMESPACE: 'EbsSnapshotCompactor',
      LOG_LEVEL: 'INFO',
    };
    const entries = TASK_MODULES.map((module): [TaskModule, lambda.Function] => {
      const id = module
        .split('_')
        .map((word) => word[0].toUpperCase() + word.slice(1))
        .join('');
      const logGroup = new logs.LogGroup(this, `${id}Logs`, {
        retention: props.logRetention,
        removalPolicy: RemovalPolicy.DESTROY,
      });
      this.logGroups.push(logGroup);
      const fn = new lambda.Function(this, id, {
        description: `ebs-snapshot-compactor task ${module} (${Stack.of(this).stackName})`,
        runtime: lambda.Runtime.PYTHON_3_13,
        architecture: lambda.Architecture.X86_64,
        handler: handlerOf(module),
        code,
        layers: [powertools],
        role: props.role,
        environment,
        memorySize: 256,
        timeout: TIMEOUTS[module] ?? Duration.minutes(1),
        tracing: lambda.Tracing.ACTIVE,
        logGroup,
        loggingFormat: lambda.LoggingFormat.JSON,
      });
      return [module, fn];
    });
    this.functions = Object.fromEntries(entries) as Record<TaskModule, lambda.Function>;
  }
}
