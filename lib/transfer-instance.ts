import { Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { Architecture } from './settings';
import { transferEgress } from './network';
import { ssmAgentPolicyDocument } from './ssm-agent-policy';
import { EXECUTION_TAG, ROLE_TAG, SNAPSHOT_ROLE, STACK_TAG, WRITER_INSTANCE_TAG } from './tags';
import { EBS_DIRECT_KMS_ACTIONS, ebsViaServices } from './task-role';

export const AL2023_AMI_PARAMETER: Record<Architecture, string> = {
  x86_64: '/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64',
  arm64: '/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64',
};

/**
 * The transfer instance's root volume as the launch template gives it. The `launch` task gets both
 * values (env ROOT_DEVICE_NAME, ROOT_VOLUME_GIB) and maps the root device itself in RunInstances:
 * encrypted whatever RunInstances does with the template's mappings, and for `method: trim` this
 * size plus the largest source volume, since the data-plane program stages each partition in a
 * scratch image under /var/tmp on the root filesystem (AL2023 grows it to the volume at boot).
 */
export const ROOT_DEVICE_NAME = '/dev/xvda';
export const ROOT_VOLUME_GIB = 8;

export interface TransferInstanceProps {
  readonly vpc: ec2.IVpc;
  readonly architecture: Architecture;
  /** Where the SSM agent sends the Command document's output. */
  readonly commandLogGroup: logs.ILogGroup;
  /** The stack tag's value: the direct snapshot grants need it on the snapshot. */
  readonly stackName: string;
  /** The keys the task role may use for new snapshots (the kmsKeyArns setting): encrypted direct snapshots. */
  readonly kmsKeyArns: string[];
}

/**
 * Everything a transfer instance is launched with except its type, subnet, market and data volumes,
 * which the `launch` task chooses per attempt.
 */
export class TransferInstance extends Construct {
  public readonly role: iam.Role;
  public readonly securityGroup: ec2.SecurityGroup;
  public readonly launchTemplate: ec2.LaunchTemplate;
  public readonly amiParameterName: string;

  constructor(scope: Construct, id: string, props: TransferInstanceProps) {
    super(scope, id);
    this.role = this.createRole(props.commandLogGroup);
    this.allowDirectSnapshotWrites(props.stackName, props.kmsKeyArns);
    this.securityGroup = this.createSecurityGroup(props.vpc);
    this.amiParameterName = AL2023_AMI_PARAMETER[props.architecture];
    this.launchTemplate = this.createLaunchTemplate();
  }

  /** SSM-managed, and allowed to write the Command document's output to its log group. */
  private createRole(commandLogGroup: logs.ILogGroup): iam.Role {
    const role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com'),
      description:
        'ebs-snapshot-compactor transfer instance: SSM-managed, writes Command output to its log group',
    });
    // AmazonSSMManagedInstanceCore without ssm:GetParameter(s) (every parameter, SecureStrings included;
    // nothing on the instance reads parameters), generated from the pinned copy of the managed policy.
    new iam.Policy(role, 'SsmAgentPolicy', {
      roles: [role],
      document: ssmAgentPolicyDocument(),
    });
    // The SSM agent checks for the log group, then creates a stream per command and writes to it.
    role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'WriteTheCommandsOutput',
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents', 'logs:DescribeLogStreams'],
        resources: [commandLogGroup.logGroupArn],
      }),
    );
    role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'FindTheCommandLogGroup',
        actions: ['logs:DescribeLogGroups'],
        resources: ['*'],
      }),
    );
    return role;
  }

  /**
   * target snapshot: the data plane puts the blocks of the snapshots start_compaction started, completes them
   * and (--verify) reads them back, through the EBS direct APIs, only on snapshots of this stack (role `snapshot`)
   * whose writer-instance tag names the calling instance. The role is shared by every execution of the stack, so
   * the grant names the execution through the instance: IAM puts ec2:SourceInstanceArn in the request context of
   * every call signed with credentials an EC2 instance got from its instance profile (IAM User Guide, "AWS global
   * condition context keys", ec2:SourceInstanceArn; policy variables take single-valued keys), and the EBS direct
   * actions take aws:ResourceTag (Service Authorization Reference, Amazon EBS). Instance ids are never reused, so
   * another execution's snapshots, pending or delivered, and every earlier delivered one are out of reach; the
   * source snapshot is never read through the EBS direct APIs (a volume is attached instead). Encrypted
   * snapshots: the kmsKeyArns keys, only through EBS.
   */
  private allowDirectSnapshotWrites(stackName: string, kmsKeyArns: string[]): void {
    const stack = Stack.of(this);
    this.role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'WriteOnlyTheDirectSnapshotsThisInstanceWrites',
        actions: [
          'ebs:PutSnapshotBlock',
          'ebs:CompleteSnapshot',
          'ebs:GetSnapshotBlock',
          'ebs:ListSnapshotBlocks',
        ],
        resources: [
          stack.formatArn({ service: 'ec2', account: '', resource: 'snapshot', resourceName: '*' }),
        ],
        conditions: {
          StringEquals: {
            [`aws:ResourceTag/${STACK_TAG}`]: stackName,
            [`aws:ResourceTag/${ROLE_TAG}`]: SNAPSHOT_ROLE,
            [`aws:ResourceTag/${WRITER_INSTANCE_TAG}`]: '${ec2:SourceInstanceArn}',
          },
          Null: { [`aws:ResourceTag/${EXECUTION_TAG}`]: 'false' },
        },
      }),
    );
    this.role.addToPolicy(
      new iam.PolicyStatement({
        sid: 'WriteEncryptedDirectSnapshotsThroughEbs',
        // The EBS user guide's policy for the EBS direct APIs on encrypted snapshots lists kms:DescribeKey too.
        actions: [...EBS_DIRECT_KMS_ACTIONS, 'kms:DescribeKey'],
        resources: kmsKeyArns,
        conditions: { StringEquals: { 'kms:ViaService': ebsViaServices(stack) } },
      }),
    );
  }

  /** No inbound; HTTPS out to the endpoints (the stack's VPC) or anywhere (the user's VPC). */
  private createSecurityGroup(vpc: ec2.IVpc): ec2.SecurityGroup {
    const securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc,
      description:
        'ebs-snapshot-compactor transfer instances: no inbound; HTTPS out to the SSM, Logs, EBS and S3 endpoints',
      allowAllOutbound: false,
    });
    const egress = transferEgress(vpc);
    if (egress) {
      // The stack's own VPC: only its interface endpoints and S3 through the gateway endpoint.
      securityGroup.addEgressRule(
        egress.endpointSecurityGroup,
        ec2.Port.tcp(443),
        'HTTPS to the SSM, SSM messages, EC2 messages, Logs and EBS direct endpoints',
      );
      securityGroup.addEgressRule(
        ec2.Peer.prefixList(egress.s3PrefixListId),
        ec2.Port.tcp(443),
        'HTTPS to S3 through the gateway endpoint',
      );
    } else {
      // The user's VPC: its routes decide where 443 goes; docs/deploy.md ("What the stack creates", transfer
      // instance) says what to allow instead.
      securityGroup.addEgressRule(
        ec2.Peer.anyIpv4(),
        ec2.Port.tcp(443),
        'HTTPS to AWS APIs (SSM, Logs, EBS, S3)',
      );
    }
    return securityGroup;
  }

  private createLaunchTemplate(): ec2.LaunchTemplate {
    const template = new ec2.LaunchTemplate(this, 'LaunchTemplate', {
      // resolve:ssm: in the template: every launch gets the AMI that is latest at that moment.
      machineImage: ec2.MachineImage.resolveSsmParameterAtLaunch(this.amiParameterName, {
        os: ec2.OperatingSystemType.LINUX,
      }),
      role: this.role,
      securityGroup: this.securityGroup,
      httpTokens: ec2.LaunchTemplateHttpTokens.REQUIRED,
      httpPutResponseHopLimit: 1,
      httpEndpoint: true,
      instanceInitiatedShutdownBehavior: ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
      blockDevices: [
        {
          deviceName: ROOT_DEVICE_NAME,
          volume: ec2.BlockDeviceVolume.ebs(ROOT_VOLUME_GIB, {
            encrypted: true,
            volumeType: ec2.EbsDeviceVolumeType.GP3,
            deleteOnTermination: true,
          }),
        },
      ],
    });
    // Nothing runs at boot (the Command document does the work): no user data, not even the empty
    // '#!/bin/bash' the launchTemplateDefaultUserData feature flag would add from the machine image.
    (template.node.defaultChild as ec2.CfnLaunchTemplate).addPropertyDeletionOverride(
      'LaunchTemplateData.UserData',
    );
    return template;
  }
}
