import { ArnFormat, CfnOutput, Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import contractMetrics from '../contract/metrics.json';
import contractTasks from '../contract/tasks.json';
import { deliveredOutputDenies } from './delivered-outputs';
import { Settings } from './settings';
import { STACK_TAG } from './tags';
import {
  checkedEnvironment,
  createTaskFunction,
  POWERTOOLS_ENVIRONMENT,
  TaskFunctionShared,
} from './task-functions';

export const METRIC_NAMESPACE = contractMetrics.namespace;
export type MetricName = keyof typeof contractMetrics.metrics;

/** The dimensions every custom metric carries (contract/metrics.json defaultDimensions). */
export function defaultDimensions(stackName: string): Record<string, string> {
  const values: Record<string, string> = {
    service: POWERTOOLS_ENVIRONMENT.POWERTOOLS_SERVICE_NAME,
    Stack: stackName,
  };
  return Object.fromEntries(contractMetrics.defaultDimensions.map((name) => [name, values[name]]));
}

/**
 * One custom metric of contract/metrics.json as CloudWatch stores it: the default dimensions plus exactly the
 * extra ones the contract gives it (anything else would name a metric no Lambda emits: the synth fails).
 */
export function contractMetric(
  stackName: string,
  name: MetricName,
  extra: Record<string, string> = {},
  props: cloudwatch.MetricOptions = {},
): cloudwatch.Metric {
  const expected = [...contractMetrics.metrics[name].extraDimensions].sort();
  if (JSON.stringify(Object.keys(extra).sort()) !== JSON.stringify(expected)) {
    throw new Error(
      `Metric ${name} has the dimensions ${expected.join(', ') || 'none'} besides the defaults.`,
    );
  }
  return new cloudwatch.Metric({
    namespace: METRIC_NAMESPACE,
    metricName: name,
    dimensionsMap: { ...defaultDimensions(stackName), ...extra },
    statistic: cloudwatch.Stats.SUM,
    period: Duration.hours(1),
    ...props,
  });
}

export interface OperationsProps {
  readonly settings: Pick<
    Settings,
    'stackName' | 'alarmEmail' | 'sweepIntervalMinutes' | 'sweepGraceMinutes'
  >;
  readonly stateMachine: sfn.StateMachine;
  readonly cleanupStateMachine?: sfn.IStateMachine;
  /** The batch state machine (docs/batch.md), once the stack has it. */
  readonly batchStateMachine?: sfn.IStateMachine;
  readonly taskFunctionShared: TaskFunctionShared;
  readonly sourceBlocksBucket: s3.IBucket;
  /** The trigger functions EventBridge invokes (by alarm name prefix) and the queue their lost events land in. */
  readonly triggers?: TriggerAlarmsProps;
}

export interface TriggerAlarmsProps {
  readonly functions: Record<string, lambda.IFunction>;
  readonly deadLetterQueue: sqs.IQueue;
}

/**
 * Operating many compactions (docs/operations.md): the sweeper on a schedule, one dashboard, alarms on an
 * encrypted SNS topic.
 */
export class Operations extends Construct {
  public readonly topic: sns.Topic;
  public readonly topicKey: kms.Key;
  public readonly sweep: lambda.Function;
  public readonly sweepRole: iam.Role;
  public readonly schedule: events.Rule;
  public readonly dashboard: cloudwatch.Dashboard;
  public readonly alarms: cloudwatch.Alarm[] = [];
  public readonly stateMachine: sfn.StateMachine;
  public readonly sourceBlocksBucket: s3.IBucket;
  private readonly stackName: string;

  constructor(scope: Construct, id: string, props: OperationsProps) {
    super(scope, id);
    this.stackName = props.settings.stackName;
    this.stateMachine = props.stateMachine;
    this.sourceBlocksBucket = props.sourceBlocksBucket;
    this.sweepRole = new iam.Role(this, 'SweepRole', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `ebs-snapshot-compactor sweeper: removes what ended executions of ${this.stackName} left`,
    });
    this.sweep = this.createSweep(props);
    this.grantSweep(props);
    this.schedule = new events.Rule(this, 'SweepSchedule', {
      description: `Sweep what ended executions of ${this.stackName} left behind`,
      schedule: events.Schedule.rate(Duration.minutes(props.settings.sweepIntervalMinutes)),
      targets: [new targets.LambdaFunction(this.sweep, { retryAttempts: 2, maxEventAge: Duration.hours(1) })],
    });
    [this.topicKey, this.topic] = this.createTopic(props.settings.alarmEmail);
    this.createAlarms(props);
    this.dashboard = this.createDashboard(props);
    new CfnOutput(Stack.of(this), 'AlarmTopicArn', {
      value: this.topic.topicArn,
      description: 'The alarms of docs/operations.md notify this SNS topic: subscribe to it',
    });
    new CfnOutput(Stack.of(this), 'DashboardName', { value: this.dashboard.dashboardName });
  }

  private createSweep(props: OperationsProps): lambda.Function {
    return createTaskFunction(this, 'sweep', {
      ...props.taskFunctionShared,
      role: this.sweepRole,
      environment: {
        ...POWERTOOLS_ENVIRONMENT,
        ...checkedEnvironment('sweep', {
          STACK_NAME: this.stackName,
          STATE_MACHINE_ARN: props.stateMachine.stateMachineArn,
          SOURCE_BLOCKS_BUCKET: props.sourceBlocksBucket.bucketName,
          SWEEP_GRACE_MINUTES: String(props.settings.sweepGraceMinutes),
          EVENT_BUS_NAME: 'default',
        }),
      },
    });
  }

  /** Exactly the calls of compactor/sweeper.py and the teardown it reuses; changes only on the stack's resources. */
  private grantSweep(props: OperationsProps): void {
    const stack = Stack.of(this);
    const ec2Arn = (resource: string, account = stack.account): string =>
      stack.formatArn({ service: 'ec2', resource, resourceName: '*', account });
    const statements = [
      new iam.PolicyStatement({
        sid: 'FindLeftovers',
        actions: [
          'ec2:DescribeInstances',
          'ec2:DescribeVolumes',
          'ec2:DescribeSnapshots',
          'ec2:DescribeImages',
        ],
        resources: ['*'],
      }),
      new iam.PolicyStatement({
        sid: 'RemoveOnlyTheStacksResources',
        actions: ['ec2:TerminateInstances', 'ec2:DeleteVolume', 'ec2:DeleteSnapshot', 'ec2:DeregisterImage'],
        resources: [ec2Arn('instance'), ec2Arn('volume'), ec2Arn('snapshot', ''), ec2Arn('image', '')],
        conditions: { StringEquals: { [`aws:ResourceTag/${STACK_TAG}`]: this.stackName } },
      }),
      // teardown's code keeps delivered outputs; IAM makes sure (lib/delivered-outputs.ts)
      ...deliveredOutputDenies(stack),
      new iam.PolicyStatement({
        sid: 'AskWhetherTheExecutionRuns',
        actions: ['states:DescribeExecution'],
        resources: [
          stack.formatArn({
            service: 'states',
            resource: 'execution',
            resourceName: `${props.stateMachine.stateMachineName}:*`,
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        ],
      }),
      new iam.PolicyStatement({
        sid: 'DeleteAnExecutionsBlockLists',
        actions: ['s3:DeleteObject'],
        resources: [props.sourceBlocksBucket.arnForObjects('*')],
      }),
      new iam.PolicyStatement({
        sid: 'FindAnExecutionsBlockLists',
        actions: ['s3:ListBucket'],
        resources: [props.sourceBlocksBucket.bucketArn],
      }),
      new iam.PolicyStatement({
        sid: 'PublishSweptEvents',
        actions: ['events:PutEvents'],
        resources: [stack.formatArn({ service: 'events', resource: 'event-bus', resourceName: 'default' })],
      }),
      new iam.PolicyStatement({
        sid: 'WriteOwnLogs',
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [this.sweep.logGroup.logGroupArn],
      }),
    ];
    statements.forEach((statement) => this.sweepRole.addToPolicy(statement));
  }

  /** KMS-encrypted (a key CloudWatch alarms may use: the AWS managed SNS key does not let them), SSL only. */
  private createTopic(alarmEmail: string | undefined): [kms.Key, sns.Topic] {
    const key = new kms.Key(this, 'AlarmTopicKey', {
      description: `ebs-snapshot-compactor ${this.stackName}: encrypts the alarm topic`,
      enableKeyRotation: true,
    });
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'LetCloudWatchAlarmsPublish',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
        conditions: { StringEquals: { 'aws:SourceAccount': Stack.of(this).account } },
      }),
    );
    const topic = new sns.Topic(this, 'AlarmTopic', {
      displayName: `ebs-snapshot-compactor ${this.stackName} alarms`,
      masterKey: key,
      enforceSSL: true,
    });
    if (alarmEmail) topic.addSubscription(new subscriptions.EmailSubscription(alarmEmail));
    return [key, topic];
  }

  private createAlarms(props: OperationsProps): void {
    const machines: [string, sfn.IStateMachine | undefined][] = [
      ['Compaction', props.stateMachine],
      ['Batch', props.batchStateMachine],
      ['Cleanup', props.cleanupStateMachine],
    ];
    for (const [name, machine] of machines) {
      if (machine)
        this.alarm(
          `${name}ExecutionsFailed`,
          this.failedOrTimedOut(machine),
          `${name} executions failed or timed out`,
        );
    }
    const interval = Duration.minutes(props.settings.sweepIntervalMinutes);
    this.alarm(
      'ResourcesLeftBehind',
      contractMetric(this.stackName, 'ResourcesSwept', {}, { period: interval }),
      'The sweeper removed resources that an ended execution left behind (see its log and the Swept event)',
    );
    this.alarm(
      'SweeperFailing',
      this.sweep.metricErrors({ period: interval, statistic: cloudwatch.Stats.SUM }),
      'The sweeper itself failed: leftovers would go unnoticed',
    );
    if (props.triggers) this.createTriggerAlarms(props.triggers);
  }

  /** A trigger that fails loses no event (its on-failure destination keeps it), but nothing starts until someone looks. */
  private createTriggerAlarms(triggers: TriggerAlarmsProps): void {
    const period = Duration.minutes(5);
    for (const [name, fn] of Object.entries(triggers.functions)) {
      this.alarm(
        `${name}Failing`,
        fn.metricErrors({ period, statistic: cloudwatch.Stats.SUM }),
        `The ${name} function failed: the event is retried, then kept in the dead-letter queue`,
      );
    }
    this.alarm(
      'TriggerEventsDeadLettered',
      triggers.deadLetterQueue.metricApproximateNumberOfMessagesVisible({
        period,
        statistic: cloudwatch.Stats.MAXIMUM,
      }),
      'Trigger events are waiting in the dead-letter queue: nothing was started for them (replay them)',
    );
  }

  /** FAILED + TIMED_OUT executions of a state machine, 5-minute sums (missing data = 0). */
  private failedOrTimedOut(machine: sfn.IStateMachine): cloudwatch.IMetric {
    const period = Duration.minutes(5);
    return new cloudwatch.MathExpression({
      expression: 'FILL(failed, 0) + FILL(timedOut, 0)',
      usingMetrics: {
        failed: machine.metricFailed({ period, statistic: cloudwatch.Stats.SUM }),
        timedOut: machine.metricTimedOut({ period, statistic: cloudwatch.Stats.SUM }),
      },
      period,
      label: 'failed + timed out',
    });
  }

  private alarm(id: string, metric: cloudwatch.IMetric, description: string): void {
    const alarm = new cloudwatch.Alarm(this, id, {
      alarmDescription: `ebs-snapshot-compactor ${this.stackName}: ${description} (docs/operations.md)`,
      metric,
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    alarm.addAlarmAction(new actions.SnsAction(this.topic));
    this.alarms.push(alarm);
  }

  private createDashboard(props: OperationsProps): cloudwatch.Dashboard {
    const dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: `${this.stackName}-operations`,
      defaultInterval: Duration.days(7),
    });
    dashboard.addWidgets(
      ...[props.stateMachine, props.batchStateMachine]
        .filter((m): m is sfn.IStateMachine => m !== undefined)
        .map((machine, index) => executionsWidget(machine, index === 0 ? 'Compactions' : 'Batches')),
      this.graph('Outcomes (report task)', [
        this.metric('Succeeded'),
        this.metric('SucceededWithWarnings'),
        this.metric('Failed'),
        this.metric('Estimated'),
      ]),
    );
    dashboard.addWidgets(
      this.graph('Bytes saved', [this.metric('BytesSaved')]),
      this.graph(
        'Seconds per phase (average)',
        contractTasks.phases.map((phase) =>
          contractMetric(
            this.stackName,
            'PhaseSeconds',
            { Phase: phase },
            { statistic: cloudwatch.Stats.AVERAGE, label: phase },
          ),
        ),
        true,
      ),
    );
    dashboard.addWidgets(...this.marketWidgets(), this.sweepWidget());
    dashboard.addWidgets(
      new cloudwatch.AlarmStatusWidget({ title: 'Alarms', alarms: this.alarms, width: 24 }),
    );
    return dashboard;
  }

  private marketWidgets(): cloudwatch.IWidget[] {
    const byMarket = (name: 'ExecutionsByMarket' | 'CapacityErrors'): cloudwatch.IMetric[] =>
      contractMetrics.dimensionValues.Market.map((market) =>
        contractMetric(this.stackName, name, { Market: market }, { label: market }),
      );
    return [
      this.graph(
        'Spot vs On-Demand (executions by market of their instance)',
        byMarket('ExecutionsByMarket'),
        true,
      ),
      this.graph('Capacity errors by market', byMarket('CapacityErrors')),
    ];
  }

  private sweepWidget(): cloudwatch.IWidget {
    return this.graph('Swept resources', [this.metric('ResourcesSwept'), this.metric('SweepRemaining')]);
  }

  private metric(name: MetricName): cloudwatch.Metric {
    return contractMetric(this.stackName, name, {}, { label: name });
  }

  private graph(title: string, metrics: cloudwatch.IMetric[], stacked = false): cloudwatch.GraphWidget {
    return new cloudwatch.GraphWidget({ title, left: metrics, width: 8, stacked });
  }
}

/** AWS/States executions of a state machine by how they ended. */
function executionsWidget(machine: sfn.IStateMachine, title: string): cloudwatch.GraphWidget {
  const sum = { statistic: cloudwatch.Stats.SUM, period: Duration.hours(1) };
  return new cloudwatch.GraphWidget({
    title: `${title}: executions`,
    width: 8,
    left: [
      machine.metricSucceeded({ ...sum, label: 'succeeded' }),
      machine.metricFailed({ ...sum, label: 'failed' }),
      machine.metricTimedOut({ ...sum, label: 'timed out' }),
      machine.metricAborted({ ...sum, label: 'aborted' }),
    ],
  });
}
