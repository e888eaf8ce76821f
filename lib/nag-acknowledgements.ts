import { App, CfnElement, Stack, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { IConstruct } from 'constructs';

/**
 * Every cdk-nag (AwsSolutions) finding this stack accepts, each with its reason; README.md ("cdk-nag acknowledgements") lists
 * them for reviewers. Acknowledgements name the exact finding where cdk-nag gives one, so a new wildcard
 * is reported instead of silently covered.
 */
export interface NagAcknowledgementTargets {
  readonly taskRole: iam.Role;
  readonly taskFunctions: lambda.Function[];
  /** The tag rule's target (not a workflow task) and its own role. */
  readonly startFromTag: lambda.Function;
  readonly startFromTagRole: iam.Role;
  readonly instanceRole: iam.Role;
  readonly stateMachine: sfn.StateMachine;
  readonly cleanupStateMachine: sfn.StateMachine;
  readonly pipelinePolicy: iam.ManagedPolicy;
  readonly deadLetterQueue: sqs.Queue;
  /** Only when the stack created the VPC. */
  readonly createdVpc?: ec2.Vpc;
  readonly sourceBlocksBucket: s3.Bucket;
}

const NAG = 'AwsSolutions::AwsSolutions-';
/** The singleton function construct id aws-cdk-lib gives every AwsCustomResource of a stack. */
const AWS_CUSTOM_RESOURCE_PROVIDER = 'AWS679f53fac002430cb0da5b7982bd2287';

/** cdk-nag v3 runs as a policy-validation plugin: an unacknowledged finding fails the synth. */
export function checkWithCdkNag(app: App): void {
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
}

function ack(scope: IConstruct, rule: string, reason: string): void {
  Validations.of(scope).acknowledge({ id: `${NAG}${rule}`, reason });
}

export function acknowledgeNagFindings(t: NagAcknowledgementTargets): void {
  ack(
    t.sourceBlocksBucket,
    'S1',
    'The bucket holds block indexes of source snapshots (no data) for at most the length of one execution; ' +
      'the task role writes and deletes them and CloudTrail records those calls; access logs would outlive them.',
  );
  ack(
    t.taskRole,
    `IAM5[Resource::<${logicalId(t.sourceBlocksBucket)}.Arn>/*]`,
    "Object keys are `<execution name>/...`, unknown before an execution starts; the bucket is the stack's own " +
      'and holds only block lists.',
  );
  const tagScoped =
    'Resource ids are not known before the workflow creates them; the statement is limited by ' +
    'aws:RequestTag/aws:ResourceTag ebs-snapshot-compactor:stack = this stack (see lib/task-role.ts).';
  for (const resource of ['instance', 'volume', 'spot-instances-request', 'network-interface']) {
    ack(
      t.taskRole,
      `IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:${resource}/*]`,
      resource === 'network-interface' || resource === 'spot-instances-request'
        ? `RunInstances creates the ${resource} of the transfer instance; the instance itself must carry the stack tag.`
        : tagScoped,
    );
  }
  for (const resource of ['snapshot', 'image']) {
    ack(
      t.taskRole,
      `IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::${resource}/*]`,
      `Source ${resource}s may belong to any account (shared or public), so they cannot be listed; changing ` +
        `or deleting ${resource}s is limited to those tagged with this stack.`,
    );
  }
  ack(
    t.taskRole,
    'IAM5[Resource::*]',
    'Describe*/Get* calls of EC2 and SSM (DescribeSnapshots, GetCommandInvocation, ...) and X-Ray ' +
      'PutTraceSegments do not support resource-level permissions.',
  );
  ack(
    t.taskRole,
    'IAM5[Action::kms:ReEncrypt*]',
    'EBS needs ReEncryptFrom and ReEncryptTo to create a volume or snapshot under another key; only via EC2.',
  );
  ack(
    t.taskRole,
    'IAM5[Resource::arn:<AWS::Partition>:kms:<AWS::Region>:<AWS::AccountId>:key/*]',
    'Default of the kmsKeyArns setting: any key of this account, but only through EC2 (kms:ViaService), ' +
      'and key policies still decide. Set kmsKeyArns to list the keys instead.',
  );
  ack(
    t.instanceRole,
    'IAM5[Resource::*]',
    'The SSM agent calls logs:DescribeLogGroups before writing Command output, and the actions of ' +
      'AmazonSSMManagedInstanceCore (copied from the pinned package minus ssm:GetParameter/GetParameters, ' +
      'lib/ssm-agent-policy.ts) are granted on * there too: ssmmessages/ec2messages have no resource types.',
  );
  for (const fn of [...t.taskFunctions, t.startFromTag]) {
    ack(
      fn,
      'L1',
      'Python 3.13 matches the public Powertools layer used (python3.13) and the runtime the Lambda package is typed and tested for.',
    );
  }
  ack(
    t.stateMachine,
    'IAM5[Resource::*]',
    'Granted by CDK for X-Ray tracing and CloudWatch Logs delivery, which have no resource-level permissions.',
  );
  for (const fn of t.taskFunctions) {
    ack(
      t.stateMachine,
      `IAM5[Resource::<${logicalId(fn)}.Arn>:*]`,
      'Granted by CDK: invoke of this task function with any version qualifier (<function arn>:*).',
    );
  }
  ack(
    t.cleanupStateMachine,
    'IAM5[Resource::*]',
    'Granted by CDK for X-Ray tracing and CloudWatch Logs delivery, which have no resource-level permissions.',
  );
  const teardown = t.taskFunctions.find((fn) => fn.node.id === 'Teardown')!;
  ack(
    t.cleanupStateMachine,
    `IAM5[Resource::<${logicalId(teardown)}.Arn>:*]`,
    'Granted by CDK: invoke of the teardown function with any version qualifier (<function arn>:*).',
  );
  ack(
    t.startFromTagRole,
    'IAM5[Resource::*]',
    'Granted by CDK for X-Ray tracing (PutTraceSegments), which has no resource-level permission.',
  );
  ack(
    t.startFromTagRole,
    `IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<${logicalId(t.stateMachine)}.Name>:*]`,
    'DescribeExecution of the execution start_from_tag named (tag-<snapshot>-<hash>) finds an existing start; ' +
      'the statement covers the executions of this one state machine.',
  );
  ack(
    t.pipelinePolicy,
    `IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<${logicalId(t.stateMachine)}.Name>:*]`,
    'Executions are named by the caller, so the statement covers the executions of this one state machine.',
  );
  ack(
    t.deadLetterQueue,
    'SQS3',
    'This queue is the dead-letter queue of the EventBridge targets; a dead-letter queue of its own would add nothing.',
  );
  if (t.createdVpc) {
    ack(
      t.createdVpc,
      'VPC7',
      'The created VPC carries only HTTPS from short-lived transfer instances to the SSM/Logs/S3 endpoints; ' +
        'pass vpcId/subnetIds to use a VPC with your own flow logs.',
    );
    ack(
      t.createdVpc,
      'IAM5[Resource::*]',
      'The S3 prefix list lookup (lib/network.ts) calls ec2:DescribeManagedPrefixLists once per deploy; Describe* ' +
        'calls have no resource-level permission.',
    );
    const provider = Stack.of(t.createdVpc).node.tryFindChild(AWS_CUSTOM_RESOURCE_PROVIDER);
    if (provider) {
      ack(
        provider,
        'IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
        "CDK's AwsCustomResource provider (the S3 prefix list lookup at deploy) writes its own logs with the " +
          'basic execution policy; it runs only while CloudFormation deploys.',
      );
      ack(provider, 'L1', 'CDK picks the runtime of its AwsCustomResource provider; it runs only at deploy.');
    }
    ack(
      t.createdVpc,
      'EC23',
      "The interface endpoints' security group accepts HTTPS from the VPC CIDR only; cdk-nag cannot resolve the CIDR token.",
    );
  }
}

function logicalId(construct: IConstruct): string {
  const stack = Stack.of(construct);
  return stack.resolve(stack.getLogicalId(construct.node.defaultChild as CfnElement)) as string;
}
