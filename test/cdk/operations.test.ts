import { App, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import contractMetrics from '../../contract/metrics.json';
import contractTasks from '../../contract/tasks.json';
import { contractMetric } from '../../lib/operations';
import { readSettings, SettingsError } from '../../lib/settings';
import { withCdkJsonContext } from './cdk-json';
import { expectDeliveredOutputDenies, synthTemplate } from './support';

/** lib/operations.ts: the sweeper and its schedule and role, the alarm topic, the alarms, the dashboard. */

type Resource = ReturnType<Template['toJSON']>;
interface Statement {
  Sid?: string;
  Effect: string;
  Action: string | string[];
  Resource: unknown;
  Condition?: Record<string, Record<string, unknown>>;
}

const STACK = 'EbsSnapshotCompactor';

function only(template: Template, type: string, idStart: string): [string, Resource] {
  const found = Object.entries(template.findResources(type)).filter(([id]) => id.startsWith(idStart));
  expect(found.map(([id]) => id)).toHaveLength(1);
  return found[0];
}

function sweepRoleStatements(template: Template): Statement[] {
  const [roleId] = only(template, 'AWS::IAM::Role', 'OperationsSweepRole');
  return Object.values(template.findResources('AWS::IAM::Policy'))
    .filter((policy) => JSON.stringify(policy.Properties.Roles) === JSON.stringify([{ Ref: roleId }]))
    .flatMap((policy) => policy.Properties.PolicyDocument.Statement as Statement[]);
}

/** The dashboard body with its tokens joined: `{"Ref":"X"}` parts become `<X>`. */
function dashboardBody(template: Template): string {
  const [, dashboard] = only(template, 'AWS::CloudWatch::Dashboard', 'OperationsDashboard');
  const body = dashboard.Properties.DashboardBody;
  const parts: unknown[] = body['Fn::Join'] ? body['Fn::Join'][1] : [body];
  return parts.map((p) => (typeof p === 'string' ? p : `<${JSON.stringify(p)}>`)).join('');
}

/** Every [namespace, name, dim, value, ...] metric array of the dashboard's widgets. */
function dashboardMetrics(template: Template): unknown[][] {
  const text = dashboardBody(template)
    .replace(/"<(\{.*?\})>"/g, '"TOKEN"')
    .replace(/<(\{.*?\})>/g, 'TOKEN');
  const body = JSON.parse(text) as { widgets: { properties: { metrics?: unknown[][] } }[] };
  return body.widgets.flatMap((w) => w.properties.metrics ?? []);
}

/** The stack's state machines by logical id without the hash (the batch one once lib/batch-workflow.ts is in). */
/**
 * The state machines an operator watches: not the launch attempt, which ends with its error instead of failing
 * (lib/attempt-workflow.ts) and whose failure anyway fails the compaction workflow it runs in.
 */
function stateMachines(template: Template): string[] {
  return Object.keys(template.findResources('AWS::StepFunctions::StateMachine'))
    .map((id) => id.replace(/[0-9A-F]{8}$/, ''))
    .filter((id) => id !== 'WorkflowAttemptStateMachine')
    .sort();
}

describe('operations', () => {
  const template = synthTemplate();

  test('the sweeper: its own role, the contract environment, every sweepIntervalMinutes', () => {
    const [, fn] = only(template, 'AWS::Lambda::Function', 'OperationsSweep');
    expect(fn.Properties.Handler).toBe('compactor.handlers.sweep.handler');
    expect(fn.Properties.Timeout).toBe(contractTasks.tasks.find((t) => t.module === 'sweep')!.timeoutSeconds);
    expect(fn.Properties.Role['Fn::GetAtt'][0]).toMatch(/^OperationsSweepRole/);
    expect(fn.Properties.Environment.Variables).toEqual({
      STACK_NAME: STACK,
      STATE_MACHINE_ARN: { Ref: expect.stringMatching(/^WorkflowStateMachine/) },
      SOURCE_BLOCKS_BUCKET: { Ref: expect.stringMatching(/^SourceBlocksBucket/) },
      SWEEP_GRACE_MINUTES: '60',
      EVENT_BUS_NAME: 'default',
      POWERTOOLS_SERVICE_NAME: 'ebs-snapshot-compactor',
      POWERTOOLS_METRICS_NAMESPACE: 'EbsSnapshotCompactor',
      LOG_LEVEL: 'INFO',
    });
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 hour)',
      State: 'ENABLED',
      Targets: [
        Match.objectLike({ Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OperationsSweep'), 'Arn'] } }),
      ],
    });
    const custom = synthTemplate({ sweepIntervalMinutes: 15, sweepGraceMinutes: 120 });
    custom.hasResourceProperties('AWS::Events::Rule', { ScheduleExpression: 'rate(15 minutes)' });
    const [, customFn] = only(custom, 'AWS::Lambda::Function', 'OperationsSweep');
    expect(customFn.Properties.Environment.Variables.SWEEP_GRACE_MINUTES).toBe('120');
  });

  test('the sweep settings are bounded', () => {
    const read = (context: Record<string, unknown>) => () =>
      readSettings(new App({ context: withCdkJsonContext(context) }).node);
    expect(read({ sweepGraceMinutes: 10 })).toThrow(SettingsError);
    expect(read({ sweepIntervalMinutes: 1 })).toThrow(SettingsError);
    expect(read({ alarmEmail: 'not-an-address' })).toThrow(SettingsError);
    expect(read({ alarmEmail: 'ops@example.com' })().alarmEmail).toBe('ops@example.com');
  });

  test('the sweeper role: Describe on *, every change only on resources tagged with this stack', () => {
    const statements = sweepRoleStatements(template);
    const bySid = Object.fromEntries(statements.filter((s) => s.Sid).map((s) => [s.Sid, s]));
    expect([bySid.FindLeftovers.Action].flat().sort()).toEqual([
      'ec2:DescribeImages',
      'ec2:DescribeInstances',
      'ec2:DescribeSnapshots',
      'ec2:DescribeVolumes',
    ]);
    expect(bySid.RemoveOnlyTheStacksResources.Condition).toEqual({
      StringEquals: { 'aws:ResourceTag/ebs-snapshot-compactor:stack': STACK },
    });
    expect(bySid.AskWhetherTheExecutionRuns.Action).toBe('states:DescribeExecution');
    expect(JSON.stringify(bySid.AskWhetherTheExecutionRuns.Resource)).toMatch(
      /:execution:.*WorkflowStateMachine/,
    );
    const destructive = statements.filter((s) =>
      [s.Action].flat().some((a) => /^ec2:(Terminate|Delete|Deregister)/.test(a)),
    );
    expect(destructive.filter((s) => s.Effect === 'Allow').map((s) => s.Sid)).toEqual([
      'RemoveOnlyTheStacksResources',
    ]);
    // teardown's code keeps delivered outputs; IAM makes sure
    expectDeliveredOutputDenies(statements);
    // nothing that creates, starts or stops: the sweeper only removes (a Deny grants nothing)
    const actions = statements
      .filter((s) => s.Effect === 'Allow')
      .flatMap((s) => [s.Action].flat())
      .filter((a) => !/^(xray|logs):/.test(a));
    expect(actions.filter((a) => /Create|Run|Start|Stop|Put(?!Events)/.test(a))).toEqual([]);
    expect(actions).not.toContain('*');
  });

  test('the alarm topic: KMS-encrypted with a rotating key CloudWatch may use, SSL only, ARN output', () => {
    const [keyId, key] = only(template, 'AWS::KMS::Key', 'OperationsAlarmTopicKey');
    expect(key.Properties.EnableKeyRotation).toBe(true);
    expect(JSON.stringify(key.Properties.KeyPolicy)).toContain('cloudwatch.amazonaws.com');
    const [topicId, topic] = only(template, 'AWS::SNS::Topic', 'OperationsAlarmTopic');
    expect(topic.Properties.KmsMasterKeyId).toEqual({ 'Fn::GetAtt': [keyId, 'Arn'] });
    template.hasResourceProperties('AWS::SNS::TopicPolicy', {
      Topics: [{ Ref: topicId }],
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        ]),
      },
    });
    template.hasOutput('AlarmTopicArn', { Value: { Ref: topicId } });
    template.resourceCountIs('AWS::SNS::Subscription', 0);
    synthTemplate({ alarmEmail: 'ops@example.com' }).hasResourceProperties('AWS::SNS::Subscription', {
      Protocol: 'email',
      Endpoint: 'ops@example.com',
    });
  });

  test('alarms: failed or timed-out executions of each state machine, leftovers swept, the sweeper or a trigger failing, trigger events dead-lettered', () => {
    const alarms = Object.values(template.findResources('AWS::CloudWatch::Alarm'));
    const [topicId] = only(template, 'AWS::SNS::Topic', 'OperationsAlarmTopic');
    for (const alarm of alarms) {
      expect(alarm.Properties.AlarmActions).toEqual([{ Ref: topicId }]);
      expect(alarm.Properties.ComparisonOperator).toBe('GreaterThanThreshold');
      expect(alarm.Properties.Threshold).toBe(0);
      expect(alarm.Properties.TreatMissingData).toBe('notBreaching');
    }
    const failed = alarms.filter((a) =>
      JSON.stringify(a.Properties.Metrics ?? []).includes('FILL(failed, 0)'),
    );
    const machines = failed.map(
      (a) => JSON.stringify(a.Properties.Metrics).match(/"(\w+StateMachine)[0-9A-F]{8}"/)![1],
    );
    expect(machines.sort()).toEqual(stateMachines(template));
    for (const alarm of failed) {
      const names = alarm.Properties.Metrics.filter((m: Resource) => m.MetricStat).map(
        (m: Resource) => m.MetricStat.Metric.MetricName,
      );
      expect(names.sort()).toEqual(['ExecutionsFailed', 'ExecutionsTimedOut']);
    }
    const swept = alarms.filter((a) => a.Properties.MetricName === 'ResourcesSwept');
    expect(swept).toHaveLength(1);
    expect(swept[0].Properties).toMatchObject({
      Namespace: contractMetrics.namespace,
      Statistic: 'Sum',
      Period: 3600,
      Dimensions: expect.arrayContaining([
        { Name: 'Stack', Value: STACK },
        { Name: 'service', Value: 'ebs-snapshot-compactor' },
      ]),
    });
    const [sweepId] = only(template, 'AWS::Lambda::Function', 'OperationsSweep');
    const errorsOf = (fnIdStart: string) =>
      alarms.filter(
        (a) =>
          a.Properties.MetricName === 'Errors' && a.Properties.Dimensions[0].Value.Ref.startsWith(fnIdStart),
      );
    expect(errorsOf(sweepId)).toHaveLength(1);
    expect(errorsOf('TriggersStartFromTag')).toHaveLength(1);
    expect(errorsOf('TriggersStartFromTag')[0].Properties).toMatchObject({
      Namespace: 'AWS/Lambda',
      Statistic: 'Sum',
      Period: 300,
    });
    const [queueId] = only(template, 'AWS::SQS::Queue', 'TriggersDeadLetters');
    const deadLettered = alarms.filter(
      (a) => a.Properties.MetricName === 'ApproximateNumberOfMessagesVisible',
    );
    expect(deadLettered).toHaveLength(1);
    expect(deadLettered[0].Properties).toMatchObject({
      Namespace: 'AWS/SQS',
      Statistic: 'Maximum',
      Period: 300,
      Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [queueId, 'QueueName'] } }],
    });
    expect(alarms).toHaveLength(stateMachines(template).length + 4);
  });

  test('the dashboard graphs the contract metrics with the dimensions the Lambdas emit', () => {
    const metrics = dashboardMetrics(template);
    const custom = metrics.filter((m) => m[0] === contractMetrics.namespace);
    const names = new Set(custom.map((m) => m[1]));
    for (const name of [
      'Succeeded',
      'SucceededWithWarnings',
      'Failed',
      'Estimated',
      'BytesSaved',
      'PhaseSeconds',
      'ExecutionsByMarket',
      'CapacityErrors',
      'ResourcesSwept',
      'SweepRemaining',
    ]) {
      expect(names).toContain(name);
    }
    for (const metric of custom) {
      const dims = Object.fromEntries(
        (metric.slice(2).filter((x) => typeof x === 'string') as string[]).reduce<string[][]>(
          (pairs, x, i, all) => (i % 2 ? pairs : [...pairs, [x, all[i + 1]]]),
          [],
        ),
      );
      const spec = contractMetrics.metrics[metric[1] as keyof typeof contractMetrics.metrics];
      expect(Object.keys(dims).sort()).toEqual(
        [...contractMetrics.defaultDimensions, ...spec.extraDimensions].sort(),
      );
      expect(dims.Stack).toBe(STACK);
    }
    const phases = custom.filter((m) => m[1] === 'PhaseSeconds').map((m) => m[m.indexOf('Phase') + 1]);
    expect(phases).toEqual(contractTasks.phases);
    const markets = custom.filter((m) => m[1] === 'CapacityErrors').map((m) => m[m.indexOf('Market') + 1]);
    expect(markets).toEqual(['Spot', 'OnDemand']);
    const states = metrics.filter((m) => m[0] === 'AWS/States').map((m) => m[1]);
    expect(stateMachines(template)).toContain('WorkflowStateMachine');
    const graphed = stateMachines(template).filter((m) => m !== 'CleanupStateMachine'); // compaction and batch
    for (const name of [
      'ExecutionsSucceeded',
      'ExecutionsFailed',
      'ExecutionsTimedOut',
      'ExecutionsAborted',
    ]) {
      expect(states.filter((s) => s === name)).toHaveLength(graphed.length);
    }
  });

  test('a metric with dimensions the contract does not give it fails the synth', () => {
    expect(() => contractMetric(STACK, 'PhaseSeconds')).toThrow(/PhaseSeconds has the dimensions Phase/);
    expect(() => contractMetric(STACK, 'BytesSaved', { Phase: 'x' })).toThrow(/BytesSaved/);
    expect(contractMetric(STACK, 'CapacityErrors', { Market: 'Spot' }).dimensions).toEqual({
      service: 'ebs-snapshot-compactor',
      Stack: STACK,
      Market: 'Spot',
    });
    expect(Stack).toBeDefined();
  });
});
