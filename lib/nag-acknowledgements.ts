import { App, CfnElement, Stack, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { IConstruct } from 'constructs';
import { batchStateMachineName } from './batch-workflow';
import type { Operations } from './operations';
import { BATCH_RESULTS_PREFIX } from './source-blocks-bucket';

/**
 * Every cdk-nag (AwsSolutions) finding this stack accepts, each with its reason; docs/deploy.md ("cdk-nag acknowledgements") lists
 * them for reviewers. Acknowledgements name the exact finding where cdk-nag gives one, so a new wildcard
 * is reported instead of silently covered.
 */
export interface NagAcknowledgementTargets {
  /** One role per workflow task function (lib/task-role.ts): each is acknowledged only what it has. */
  readonly taskRoles: iam.Role[];
  readonly taskFunctions: lambda.Function[];
  /** The tag rule's target (not a workflow task) and its own role. */
  readonly startFromTag: lambda.Function;
  readonly startFromTagRole: iam.Role;
  readonly instanceRole: iam.Role;
  readonly stateMachine: sfn.StateMachine;
  /** The launch attempt, a child execution of the compaction workflow (lib/attempt-workflow.ts). */
  readonly attemptStateMachine: sfn.StateMachine;
  readonly cleanupStateMachine: sfn.StateMachine;
  readonly pipelinePolicy: iam.ManagedPolicy;
  readonly deadLetterQueue: sqs.Queue;
  /** Only when the stack created the VPC. */
  readonly createdVpc?: ec2.Vpc;
  readonly sourceBlocksBucket: s3.Bucket;
  /** The batch state machine and its results bucket (lib/batch-workflow.ts). */
  readonly batchStateMachine?: sfn.StateMachine;
  readonly batchResultsBucket?: s3.Bucket;
  /** The sweeper, the dashboard and the alarms (lib/operations.ts). */
  readonly operations?: Operations;
}

const NAG = 'AwsSolutions::AwsSolutions-';
/** The singleton function construct id aws-cdk-lib gives every AwsCustomResource of a stack. */
const AWS_CUSTOM_RESOURCE_PROVIDER = 'AWS679f53fac002430cb0da5b7982bd2287';

/** cdk-nag v3 runs as a policy-validation plugin: an unacknowledged finding fails the synth. */
export function checkWithCdkNag(app: App): void {
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
}

/** One accepted finding: where it is, the rule (after `AwsSolutions-`, with cdk-nag's finding id) and why. */
interface Acknowledgement {
  readonly on: IConstruct;
  readonly rule: string;
  readonly reason: string;
}

const TAG_SCOPED =
  'Resource ids are not known before the workflow creates them; the statement is limited by ' +
  'aws:RequestTag/aws:ResourceTag ebs-snapshot-compactor:stack = this stack (see lib/task-role.ts).';
const CDK_TRACING_AND_LOGS =
  'Granted by CDK for X-Ray tracing and CloudWatch Logs delivery, which have no resource-level permissions.';
const PYTHON_RUNTIME =
  'Python 3.13 matches the public Powertools layer used (python3.13) and the runtime the Lambda package is typed and tested for.';

/** The Region/account-scoped EC2 resources the workflow creates, and who creates them. */
const CREATED_EC2_RESOURCES: Record<string, string> = {
  instance: TAG_SCOPED,
  volume: TAG_SCOPED,
  'spot-instances-request':
    'RunInstances creates the spot-instances-request of the transfer instance; the instance itself must carry the stack tag.',
  'network-interface':
    'RunInstances creates the network-interface of the transfer instance; the instance itself must carry the stack tag.',
};

/** A finding a task role may have: acknowledged on each role whose policies contain `needle` (resolved JSON). */
interface TaskRoleFinding {
  readonly needle: string;
  readonly rule: string;
  readonly reason: string;
}

/** The resolved JSON of a role's inline and default policies, where a task role's findings are looked for. */
function policyText(role: iam.Role): string {
  const cfn = role.node.defaultChild as iam.CfnRole;
  const defaultPolicy = role.node.tryFindChild('DefaultPolicy') as iam.Policy | undefined;
  return JSON.stringify(Stack.of(role).resolve([cfn.policies, defaultPolicy?.document]));
}

/** Each finding on the task roles that have it, so no role is acknowledged a wildcard it does not grant. */
function onTaskRoles(t: NagAcknowledgementTargets, findings: TaskRoleFinding[]): Acknowledgement[] {
  return t.taskRoles.flatMap((on) => {
    const text = policyText(on);
    return findings.filter((f) => text.includes(f.needle)).map(({ rule, reason }) => ({ on, rule, reason }));
  });
}

function taskRoleAcknowledgements(t: NagAcknowledgementTargets): Acknowledgement[] {
  return onTaskRoles(t, [
    {
      needle: `{"Fn::GetAtt":["${logicalId(t.sourceBlocksBucket)}","Arn"]},"/*"`,
      rule: `IAM5[Resource::<${logicalId(t.sourceBlocksBucket)}.Arn>/*]`,
      reason:
        "Object keys are `<execution name>/...`, unknown before an execution starts; the bucket is the stack's own " +
        'and holds only block lists.',
    },
    ...Object.entries(CREATED_EC2_RESOURCES).map(([resource, reason]) => ({
      needle: `:${resource}/*"`,
      rule: `IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:${resource}/*]`,
      reason,
    })),
    ...['snapshot', 'image'].map((resource) => ({
      needle: `::${resource}/*"`,
      rule: `IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::${resource}/*]`,
      reason:
        `Source ${resource}s may belong to any account (shared or public), so they cannot be listed; changing ` +
        `or deleting ${resource}s is limited to those tagged with this stack` +
        (resource === 'snapshot'
          ? '; a direct snapshot (ebs:StartSnapshot and its tags) has no id before it starts, and must be ' +
            'started with the stack, an execution and role snapshot as request tags.'
          : '.'),
    })),
    {
      needle: '"Resource":"*"',
      rule: 'IAM5[Resource::*]',
      reason:
        'Describe*/Get* calls of EC2 and SSM (DescribeSnapshots, GetCommandInvocation, ...) and X-Ray ' +
        'PutTraceSegments do not support resource-level permissions.',
    },
    {
      needle: 'kms:ReEncrypt*',
      rule: 'IAM5[Action::kms:ReEncrypt*]',
      reason:
        'EBS needs ReEncryptFrom and ReEncryptTo to create a volume or snapshot under another key (and lists ' +
        'kms:ReEncrypt* for the EBS direct APIs); only via EC2/EBS (kms:ViaService).',
    },
    {
      needle: ':key/*"',
      rule: 'IAM5[Resource::arn:<AWS::Partition>:kms:<AWS::Region>:<AWS::AccountId>:key/*]',
      reason:
        'Default of the kmsKeyArns setting: any key of this account, but only through EC2 or EBS ' +
        '(kms:ViaService), and key policies still decide. Set kmsKeyArns to list the keys instead.',
    },
  ]);
}

/** target snapshot: the transfer instance writes and reads the stack's direct snapshots (lib/transfer-instance.ts). */
function instanceRoleAcknowledgements(t: NagAcknowledgementTargets): Acknowledgement[] {
  const on = t.instanceRole;
  return [
    {
      on,
      rule: 'IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::snapshot/*]',
      reason:
        'The direct snapshots start_compaction starts: ids unknown before; PutSnapshotBlock, CompleteSnapshot, ' +
        'GetSnapshotBlock and ListSnapshotBlocks only on snapshots tagged with this stack, an execution, role ' +
        'snapshot and, as writer-instance, the calling instance (aws:ResourceTag = ${ec2:SourceInstanceArn}): ' +
        "this execution's snapshots only.",
    },
    {
      on,
      rule: 'IAM5[Action::kms:ReEncrypt*]',
      reason:
        'The KMS actions the EBS user guide lists for the EBS direct APIs on an encrypted snapshot; only via ' +
        'EBS (kms:ViaService).',
    },
    {
      on,
      rule: 'IAM5[Resource::arn:<AWS::Partition>:kms:<AWS::Region>:<AWS::AccountId>:key/*]',
      reason:
        'Default of the kmsKeyArns setting (the keys of the new snapshots): any key of this account, only via EBS ' +
        '(kms:ViaService), and key policies still decide. Set kmsKeyArns to list the keys instead.',
    },
  ];
}

function functionAcknowledgements(t: NagAcknowledgementTargets): Acknowledgement[] {
  return [
    {
      on: t.instanceRole,
      rule: 'IAM5[Resource::*]',
      reason:
        'The SSM agent calls logs:DescribeLogGroups before writing Command output, and the actions of ' +
        'AmazonSSMManagedInstanceCore (copied from the pinned package minus ssm:GetParameter/GetParameters, ' +
        'lib/ssm-agent-policy.ts) are granted on * there too: ssmmessages/ec2messages have no resource types.',
    },
    ...[...t.taskFunctions, t.startFromTag].map((fn) => ({ on: fn, rule: 'L1', reason: PYTHON_RUNTIME })),
  ];
}

function stateMachineAcknowledgements(t: NagAcknowledgementTargets): Acknowledgement[] {
  const teardown = t.taskFunctions.find((fn) => fn.node.id === 'Teardown')!;
  const executions = `arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<${logicalId(t.stateMachine)}.Name>:*`;
  return [
    { on: t.stateMachine, rule: 'IAM5[Resource::*]', reason: CDK_TRACING_AND_LOGS },
    ...t.taskFunctions.map((fn) => ({
      on: t.stateMachine,
      rule: `IAM5[Resource::<${logicalId(fn)}.Arn>:*]`,
      reason: 'Granted by CDK: invoke of this task function with any version qualifier (<function arn>:*).',
    })),
    {
      on: t.stateMachine,
      rule: `IAM5[Resource::${executionsCutFromArn(t.attemptStateMachine, '*')}]`,
      reason:
        'Granted by CDK for startExecution.sync:2: DescribeExecution/StopExecution of the launch attempts, ' +
        'child executions named after this execution, on the attempt state machine only.',
    },
    { on: t.attemptStateMachine, rule: 'IAM5[Resource::*]', reason: CDK_TRACING_AND_LOGS },
    ...t.taskFunctions.map((fn) => ({
      on: t.attemptStateMachine,
      rule: `IAM5[Resource::<${logicalId(fn)}.Arn>:*]`,
      reason: 'Granted by CDK: invoke of this task function with any version qualifier (<function arn>:*).',
    })),
    { on: t.cleanupStateMachine, rule: 'IAM5[Resource::*]', reason: CDK_TRACING_AND_LOGS },
    {
      on: t.cleanupStateMachine,
      rule: `IAM5[Resource::<${logicalId(teardown)}.Arn>:*]`,
      reason:
        'Granted by CDK: invoke of the teardown function with any version qualifier (<function arn>:*).',
    },
    {
      on: t.startFromTagRole,
      rule: 'IAM5[Resource::*]',
      reason: 'Granted by CDK for X-Ray tracing (PutTraceSegments), which has no resource-level permission.',
    },
    {
      on: t.startFromTagRole,
      rule: `IAM5[Resource::${executions}]`,
      reason:
        'DescribeExecution of the execution start_from_tag named (tag-<snapshot>-<hash>) finds an existing start; ' +
        'the statement covers the executions of this one state machine.',
    },
    {
      on: t.pipelinePolicy,
      rule: `IAM5[Resource::${executions}]`,
      reason:
        'Executions are named by the caller, so the statement covers the executions of this one state machine.',
    },
    {
      on: t.pipelinePolicy,
      rule: `IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<${logicalId(t.attemptStateMachine)}.Name>:*]`,
      reason:
        "The launch attempts, child executions named after their workflow execution, whose histories hold the copy's " +
        'progress (`ebs-compactor --wait`, status): read only, the attempt state machine only.',
    },
  ];
}

/** Only when the stack created the VPC: its flow logs, the prefix-list lookup and the endpoints' ingress. */
function createdVpcAcknowledgements(vpc: ec2.Vpc): Acknowledgement[] {
  const provider = Stack.of(vpc).node.tryFindChild(AWS_CUSTOM_RESOURCE_PROVIDER);
  return [
    {
      on: vpc,
      rule: 'VPC7',
      reason:
        'The created VPC carries only HTTPS from short-lived transfer instances to the SSM/Logs/EBS/S3 endpoints; ' +
        'pass vpcId/subnetIds to use a VPC with your own flow logs.',
    },
    {
      on: vpc,
      rule: 'IAM5[Resource::*]',
      reason:
        'The S3 prefix list lookup (lib/network.ts) calls ec2:DescribeManagedPrefixLists once per deploy; Describe* ' +
        'calls have no resource-level permission.',
    },
    ...(provider
      ? [
          {
            on: provider,
            rule: 'IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
            reason:
              "CDK's AwsCustomResource provider (the S3 prefix list lookup at deploy) writes its own logs with the " +
              'basic execution policy; it runs only while CloudFormation deploys.',
          },
          {
            on: provider,
            rule: 'L1',
            reason: 'CDK picks the runtime of its AwsCustomResource provider; it runs only at deploy.',
          },
        ]
      : []),
    {
      on: vpc,
      rule: 'EC23',
      reason:
        "The interface endpoints' security group accepts HTTPS from the VPC CIDR only; cdk-nag cannot resolve the CIDR token.",
    },
  ];
}

/** Every accepted finding of the stack, in one list. */
export function nagAcknowledgements(t: NagAcknowledgementTargets): Acknowledgement[] {
  return [
    {
      on: t.sourceBlocksBucket,
      rule: 'S1',
      reason:
        'The bucket holds block indexes of source snapshots (no data) for at most the length of one execution; ' +
        'the task role writes and deletes them and CloudTrail records those calls; access logs would outlive them.',
    },
    ...taskRoleAcknowledgements(t),
    ...instanceRoleAcknowledgements(t),
    ...functionAcknowledgements(t),
    ...stateMachineAcknowledgements(t),
    {
      on: t.deadLetterQueue,
      rule: 'SQS3',
      reason:
        'This queue is the dead-letter queue of the EventBridge targets; a dead-letter queue of its own would add nothing.',
    },
    ...(t.createdVpc ? createdVpcAcknowledgements(t.createdVpc) : []),
    ...(t.batchStateMachine && t.batchResultsBucket
      ? batchAcknowledgements(t, t.batchStateMachine, t.batchResultsBucket)
      : []),
    ...(t.operations ? operationsAcknowledgements(t.operations) : []),
  ];
}

/** `execution:<the state machine's name, as CDK's grants cut it from the ARN>` + `suffix`, as cdk-nag prints it. */
function executionsCutFromArn(stateMachine: sfn.StateMachine, suffix: string): string {
  const name = JSON.stringify({
    'Fn::Select': [6, { 'Fn::Split': [':', { Ref: logicalId(stateMachine) }] }],
  });
  return `arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:${name}${suffix}`;
}

/** The batch state machine (lib/batch-workflow.ts), its results bucket and who reads it. */
function batchAcknowledgements(
  t: NagAcknowledgementTargets,
  batch: sfn.StateMachine,
  bucket: s3.Bucket,
): Acknowledgement[] {
  const batchFunctions = t.taskFunctions.filter((fn) =>
    ['ResolveBatch', 'SummarizeBatch'].includes(fn.node.id),
  );
  const batchObjects = `IAM5[Resource::<${logicalId(bucket)}.Arn>/batches/*]`;
  return [
    {
      on: bucket,
      rule: 'S1',
      reason:
        'The bucket holds batch results the batch state machine and summarize_batch write; CloudTrail records ' +
        'those calls and a lifecycle rule deletes them after batchResultRetentionDays.',
    },
    { on: batch, rule: 'IAM5[Resource::*]', reason: CDK_TRACING_AND_LOGS },
    ...batchFunctions.map((fn) => ({
      on: batch,
      rule: `IAM5[Resource::<${logicalId(fn)}.Arn>:*]`,
      reason:
        'Granted by CDK: invoke of this batch task function with any version qualifier (<function arn>:*).',
    })),
    {
      on: batch,
      rule: `IAM5[Resource::arn:<AWS::Partition>:s3:::<${logicalId(bucket)}>/*]`,
      reason:
        "Granted by CDK for the Distributed Map's ResultWriter (PutObject, GetObject, multipart upload parts): " +
        'keys are `batches/<map run id>/...`, unknown before the run; the bucket holds only batch results.',
    },
    {
      on: batch,
      rule: `IAM5[Resource::${executionsCutFromArn(t.stateMachine, '*')}]`,
      reason:
        'Granted by CDK for startExecution.sync:2: DescribeExecution/StopExecution of the child executions, ' +
        'whose names come from the batch items, on the compaction state machine only.',
    },
    ...[':*', '/*:*'].map((suffix) => ({
      on: batch,
      rule: `IAM5[Resource::${executionsCutFromArn(batch, suffix)}]`,
      reason:
        "Granted by CDK for the Distributed Map: Describe/Stop/Redrive of the batch state machine's own executions " +
        'and map run iterations, whose ids Step Functions picks.',
    })),
    ...batchReaderAcknowledgements(t, batch, batchObjects),
  ];
}

/** Who reads the batch results: summarize_batch (task role) and pipelines (pipeline policy). */
function batchReaderAcknowledgements(
  t: NagAcknowledgementTargets,
  batch: sfn.StateMachine,
  batchObjects: string,
): Acknowledgement[] {
  const batchExecutions = `execution:${batchStateMachineName(Stack.of(batch).stackName)}:*`;
  return [
    ...onTaskRoles(t, [
      {
        needle: `"/${BATCH_RESULTS_PREFIX}/*"`,
        rule: batchObjects,
        reason:
          'summarize_batch reads the Map run files (`batches/<map run id>/`) and writes `batches/<batch>/batch-report.json`: ' +
          'ids unknown in advance; the bucket holds only batch results.',
      },
      {
        needle: `:${batchExecutions}"`,
        rule: `IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:${batchExecutions}]`,
        reason:
          "summarize_batch finds a failed batch's map run with ListMapRuns on that batch execution: any execution of " +
          'the batch state machine only.',
      },
    ]),
    {
      on: t.pipelinePolicy,
      rule: `IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:mapRun:${batchStateMachineName(Stack.of(batch).stackName)}/*]`,
      reason:
        "DescribeMapRun of a batch's Map Run (item counts for `ebs-compactor batch --wait`): ids Step Functions picks.",
    },
    {
      on: t.pipelinePolicy,
      rule: batchObjects,
      reason:
        'A pipeline reads the reports and result files of the batches it started; ids unknown in advance.',
    },
    {
      on: t.pipelinePolicy,
      rule: `IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<${logicalId(batch)}.Name>:*]`,
      reason:
        'Batch executions are named by the caller, so the statement covers the executions of the batch state machine.',
    },
  ];
}

/** The sweeper's function and role (lib/operations.ts). */
function operationsAcknowledgements(o: Operations): Acknowledgement[] {
  return [
    { on: o.sweep, rule: 'L1', reason: PYTHON_RUNTIME },
    {
      on: o.sweepRole,
      rule: 'IAM5[Resource::*]',
      reason:
        'EC2 Describe calls (finding the stack-tagged leftovers) and X-Ray (granted by CDK) have no resource-level permissions.',
    },
    ...['instance/*', 'volume/*'].map((resource) => ({
      on: o.sweepRole,
      rule: `IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:${resource}]`,
      reason:
        'The leftovers of any execution; terminate and delete only with aws:ResourceTag ebs-snapshot-compactor:stack = this stack.',
    })),
    ...['snapshot/*', 'image/*'].map((resource) => ({
      on: o.sweepRole,
      rule: `IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::${resource}]`,
      reason:
        'Undelivered outputs of any execution; delete and deregister only with aws:ResourceTag ebs-snapshot-compactor:stack = this stack.',
    })),
    {
      on: o.sweepRole,
      rule: `IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<${logicalId(o.stateMachine)}.Name>:*]`,
      reason:
        "DescribeExecution of the execution named by a leftover's tag, on this state machine's executions only.",
    },
    {
      on: o.sweepRole,
      rule: `IAM5[Resource::<${logicalId(o.sourceBlocksBucket)}.Arn>/*]`,
      reason:
        "Block lists are keyed by execution name; the sweeper deletes only the prefix of an execution it sweeps, in the stack's own bucket.",
    },
  ];
}

export function acknowledgeNagFindings(t: NagAcknowledgementTargets): void {
  for (const { on, rule, reason } of nagAcknowledgements(t)) {
    Validations.of(on).acknowledge({ id: `${NAG}${rule}`, reason });
  }
}

function logicalId(construct: IConstruct): string {
  const stack = Stack.of(construct);
  return stack.resolve(stack.getLogicalId(construct.node.defaultChild as CfnElement)) as string;
}
