import { Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';

export const STACK_TAG = 'ebs-snapshot-compactor:stack';
/** Put by check_snapshots on the new snapshots once all are completed (lambdas/compactor/tags.py). */
export const DELIVERED_TAG = 'ebs-snapshot-compactor:delivered';

export interface TaskRoleProps {
  readonly stackName: string;
  readonly subnetIds: string[];
  readonly securityGroupId: string;
  readonly launchTemplateId: string;
  readonly amiParameterName: string;
  readonly instanceRole: iam.IRole;
  readonly documentName: string;
  /** Not granted today: no task reads the command log group (the summary comes from GetCommandInvocation). */
  readonly commandLogGroupArn: string;
  /** Keys the workflow may use through EC2. */
  readonly kmsKeyArns: string[];
  /** The source snapshots' block lists (lib/source-blocks-bucket.ts). */
  readonly sourceBlocksBucket: s3.IBucket;
}

/**
 * The one role of the task Lambdas. Everything that creates resources must tag them with the stack tag
 * (aws:RequestTag) and everything that changes or deletes resources needs that tag on them
 * (aws:ResourceTag), so the functions cannot touch anything this stack did not make.
 */
export class TaskRole extends Construct {
  public readonly role: iam.Role;

  constructor(scope: Construct, id: string, props: TaskRoleProps) {
    super(scope, id);
    const stack = Stack.of(this);
    const ec2Arn = (resource: string, account: string = stack.account) =>
      stack.formatArn({ service: 'ec2', resource, resourceName: '*', account });
    const requestTagged = { StringEquals: { [`aws:RequestTag/${STACK_TAG}`]: props.stackName } };
    const resourceTagged = { StringEquals: { [`aws:ResourceTag/${STACK_TAG}`]: props.stackName } };
    const launchTemplateArn = stack.formatArn({
      service: 'ec2',
      resource: 'launch-template',
      resourceName: props.launchTemplateId,
    });
    // Every resource RunInstances authorizes carries ec2:LaunchTemplate when the call names a template
    // (IAM data: all of them except the Spot request), so nothing can be launched without the stack's own.
    const withTheStacksTemplate = { 'ec2:LaunchTemplate': launchTemplateArn };
    const statements: iam.PolicyStatement[] = [
      // Exactly the Describe/Get calls of lambdas/compactor (the twin's IAM check fails on any other).
      new iam.PolicyStatement({
        sid: 'Describe',
        actions: [
          'ec2:DescribeSnapshots',
          'ec2:DescribeImages',
          'ec2:DescribeImageAttribute',
          'ec2:DescribeInstances',
          'ec2:DescribeVolumes',
          'ec2:DescribeAvailabilityZones',
          'ec2:DescribeFastSnapshotRestores',
          'ec2:GetEbsDefaultKmsKeyId',
          'ssm:DescribeInstanceInformation',
          'ssm:GetCommandInvocation',
        ],
        resources: ['*'],
      }),
      new iam.PolicyStatement({
        sid: 'LaunchTaggedInstancesAndVolumesFromTheStacksTemplate',
        actions: ['ec2:RunInstances'],
        resources: [ec2Arn('instance'), ec2Arn('volume')],
        conditions: {
          StringEquals: { ...requestTagged.StringEquals, ...withTheStacksTemplate },
        },
      }),
      new iam.PolicyStatement({
        sid: 'RunInstancesWithTheStacksTemplateAndNetwork',
        actions: ['ec2:RunInstances'],
        resources: [
          ...props.subnetIds.map((subnetId) =>
            stack.formatArn({ service: 'ec2', resource: 'subnet', resourceName: subnetId }),
          ),
          stack.formatArn({
            service: 'ec2',
            resource: 'security-group',
            resourceName: props.securityGroupId,
          }),
          launchTemplateArn,
          ec2Arn('network-interface'),
          // The AMI's own snapshots (no source snapshot is mapped at launch any more).
          ec2Arn('snapshot', ''),
        ],
        conditions: { StringEquals: withTheStacksTemplate },
      }),
      new iam.PolicyStatement({
        sid: 'RunInstancesOnlyFromAmazonOwnedImages',
        actions: ['ec2:RunInstances'],
        // The template's image is the public AL2023 AMI of an SSM parameter (resolve:ssm:); EC2 authorizes the
        // resolved image, whose owner alias is "amazon".
        resources: [ec2Arn('image', '')],
        conditions: { StringEquals: { ...withTheStacksTemplate, 'ec2:Owner': 'amazon' } },
      }),
      new iam.PolicyStatement({
        sid: 'RunSpotInstances',
        actions: ['ec2:RunInstances'],
        // The Spot request of a Spot launch; it ends with the instance and is never acted on later. It has no
        // ec2:LaunchTemplate key; the instance statement above still requires the template.
        resources: [ec2Arn('spot-instances-request')],
      }),
      new iam.PolicyStatement({
        sid: 'ResolveTheAmiParameterOfTheLaunchTemplate',
        actions: ['ssm:GetParameters', 'ssm:GetParameter'],
        resources: [
          stack.formatArn({
            service: 'ssm',
            resource: 'parameter',
            resourceName: props.amiParameterName.replace(/^\//, ''),
            account: '',
          }),
        ],
      }),
      new iam.PolicyStatement({
        sid: 'CreateTaggedVolumes',
        actions: ['ec2:CreateVolume'],
        resources: [ec2Arn('volume')],
        conditions: requestTagged,
      }),
      new iam.PolicyStatement({
        sid: 'CreateVolumesFromAnySourceSnapshot',
        actions: ['ec2:CreateVolume'],
        // Source snapshots may be shared by other accounts; the volume must carry the stack tag (above).
        resources: [ec2Arn('snapshot', '')],
      }),
      new iam.PolicyStatement({
        sid: 'TagOnlyWhileCreating',
        actions: ['ec2:CreateTags'],
        resources: [
          ec2Arn('instance'),
          ec2Arn('volume'),
          ec2Arn('spot-instances-request'),
          ec2Arn('snapshot', ''),
          ec2Arn('image', ''),
        ],
        conditions: {
          StringEquals: {
            'ec2:CreateAction': ['RunInstances', 'CreateVolume', 'CreateSnapshot', 'RegisterImage'],
          },
        },
      }),
      new iam.PolicyStatement({
        sid: 'MarkTheStacksSnapshotsDelivered',
        actions: ['ec2:CreateTags'],
        resources: [ec2Arn('snapshot', '')],
        conditions: {
          StringEquals: {
            ...resourceTagged.StringEquals,
            [`aws:RequestTag/${DELIVERED_TAG}`]: 'true',
          },
          'ForAllValues:StringEquals': { 'aws:TagKeys': [DELIVERED_TAG] },
        },
      }),
      new iam.PolicyStatement({
        sid: 'SnapshotTheStacksVolumes',
        actions: ['ec2:CreateSnapshot'],
        resources: [ec2Arn('volume')],
        conditions: resourceTagged,
      }),
      new iam.PolicyStatement({
        sid: 'CreateTaggedSnapshotsAndImages',
        actions: ['ec2:CreateSnapshot', 'ec2:RegisterImage'],
        resources: [ec2Arn('snapshot', ''), ec2Arn('image', '')],
        conditions: requestTagged,
      }),
      new iam.PolicyStatement({
        sid: 'RegisterImagesFromTheStacksSnapshots',
        actions: ['ec2:RegisterImage'],
        resources: [ec2Arn('snapshot', '')],
        conditions: resourceTagged,
      }),
      new iam.PolicyStatement({
        sid: 'ChangeOnlyTheStacksResources',
        actions: [
          'ec2:TerminateInstances',
          'ec2:AttachVolume',
          'ec2:DeleteVolume',
          'ec2:DeleteSnapshot',
          'ec2:DeregisterImage',
          'ec2:EnableFastSnapshotRestores',
        ],
        resources: [ec2Arn('instance'), ec2Arn('volume'), ec2Arn('snapshot', ''), ec2Arn('image', '')],
        conditions: resourceTagged,
      }),
      new iam.PolicyStatement({
        sid: 'PassOnlyTheTransferInstanceRoleToEc2',
        actions: ['iam:PassRole'],
        resources: [props.instanceRole.roleArn],
        conditions: { StringEquals: { 'iam:PassedToService': 'ec2.amazonaws.com' } },
      }),
      // An account's first Spot launch creates EC2's Spot service-linked role; without this RunInstances fails
      // with AuthFailure.ServiceLinkedRoleCreationNotPermitted instead of launching (or falling back).
      new iam.PolicyStatement({
        sid: 'CreateTheSpotServiceLinkedRole',
        actions: ['iam:CreateServiceLinkedRole'],
        resources: [
          stack.formatArn({
            service: 'iam',
            region: '',
            resource: 'role',
            resourceName: 'aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot',
          }),
        ],
        conditions: { StringEquals: { 'iam:AWSServiceName': 'spot.amazonaws.com' } },
      }),
      new iam.PolicyStatement({
        sid: 'SendTheCompactionDocument',
        actions: ['ssm:SendCommand'],
        resources: [
          stack.formatArn({ service: 'ssm', resource: 'document', resourceName: props.documentName }),
        ],
      }),
      new iam.PolicyStatement({
        sid: 'SendCommandsOnlyToTheStacksInstances',
        actions: ['ssm:SendCommand'],
        resources: [ec2Arn('instance')],
        conditions: { StringEquals: { [`ssm:resourceTag/${STACK_TAG}`]: props.stackName } },
      }),
      new iam.PolicyStatement({
        sid: 'UseKeysOnlyThroughEc2',
        actions: ['kms:Decrypt', 'kms:ReEncrypt*', 'kms:GenerateDataKeyWithoutPlaintext', 'kms:CreateGrant'],
        resources: props.kmsKeyArns,
        conditions: { StringEquals: { 'kms:ViaService': `ec2.${stack.region}.amazonaws.com` } },
      }),
      new iam.PolicyStatement({
        sid: 'ListTheBlocksOfAnySourceSnapshot',
        // Metadata only (block indexes), never data: GetSnapshotBlock is not granted. Source snapshots may be
        // shared by other accounts, so they cannot be listed by ARN.
        actions: ['ebs:ListSnapshotBlocks'],
        resources: [ec2Arn('snapshot', '')],
      }),
      new iam.PolicyStatement({
        sid: 'ReadEncryptedSnapshotsThroughEbs',
        // ListSnapshotBlocks of an encrypted snapshot needs its key (EBS direct APIs, "Control access"); only
        // through EBS. If EBS evaluates it otherwise, the listing is refused and that volume is copied without a
        // block list (compactor/source_blocks.py): slower, never wrong.
        actions: ['kms:Decrypt'],
        resources: props.kmsKeyArns,
        conditions: { StringEquals: { 'kms:ViaService': `ebs.${stack.region}.amazonaws.com` } },
      }),
      new iam.PolicyStatement({
        sid: 'KeepTheBlockListsInTheStacksBucket',
        // start_compaction signs the instance's GET with this role, so the instance role needs no S3 grant.
        actions: ['s3:PutObject', 's3:GetObject', 's3:DeleteObject'],
        resources: [props.sourceBlocksBucket.arnForObjects('*')],
      }),
      new iam.PolicyStatement({
        sid: 'FindAnExecutionsBlockLists',
        actions: ['s3:ListBucket'],
        resources: [props.sourceBlocksBucket.bucketArn],
      }),
      new iam.PolicyStatement({
        sid: 'CheckKeysBeforeLaunching',
        actions: ['kms:DescribeKey'],
        resources: props.kmsKeyArns,
      }),
      new iam.PolicyStatement({
        sid: 'PublishCompletionEvents',
        actions: ['events:PutEvents'],
        resources: [stack.formatArn({ service: 'events', resource: 'event-bus', resourceName: 'default' })],
      }),
    ];
    this.role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: 'ebs-snapshot-compactor task Lambdas: acts only on resources tagged with this stack',
      inlinePolicies: { Tasks: new iam.PolicyDocument({ statements }) },
    });
  }

  /** Lets the functions write to their own log groups and nowhere else (the ARNs end in :*). */
  allowLogging(logGroupArns: string[]): void {
    this.role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'WriteOwnLogs',
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: logGroupArns,
      }),
    );
  }
}
