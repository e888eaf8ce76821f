import { Annotations, Fn, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as cr from 'aws-cdk-lib/custom-resources';
import { Construct } from 'constructs';
import { Settings } from './settings';

/** Where transfer instances run: the user's subnets, or a small private VPC made for them. */
export interface TransferNetwork {
  readonly vpc: ec2.IVpc;
  readonly subnetIds: string[];
  /** Set when the stack created the VPC (not when it uses the user's). */
  readonly createdVpc?: ec2.Vpc;
}

/**
 * Without vpcId/subnetIds the stack creates a VPC with private isolated subnets in two AZs. Transfer
 * instances need only the SSM, CloudWatch Logs and EBS direct APIs (interface endpoints) and S3 (gateway
 * endpoint, free; AL2023 repositories and SSM agent updates live in S3), so there is no NAT gateway. With the
 * user's VPC nothing is created: its subnets must reach those APIs, ebs.<region>.amazonaws.com included
 * (docs/deploy.md).
 */
export function transferNetwork(scope: Construct, settings: Settings): TransferNetwork {
  if (settings.vpcId !== undefined && settings.subnetIds !== undefined) {
    // No lookup: synth stays offline; the subnets are only passed on to RunInstances and IAM conditions.
    const vpc = ec2.Vpc.fromVpcAttributes(scope, 'Vpc', {
      vpcId: settings.vpcId,
      availabilityZones: Fn.getAzs(),
    });
    Annotations.of(vpc).acknowledgeWarning(
      '@aws-cdk/aws-ec2:vpcAttributeIsListTokenavailabilityZones',
      'Nothing asks the imported VPC for its subnets or AZs at synth: the subnets are the subnetIds setting.',
    );
    return { vpc, subnetIds: settings.subnetIds };
  }
  const vpc = new ec2.Vpc(scope, 'Vpc', {
    maxAzs: 2,
    natGateways: 0,
    subnetConfiguration: [{ name: 'transfer', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 }],
    gatewayEndpoints: { S3: { service: ec2.GatewayVpcEndpointAwsService.S3 } },
  });
  const endpoints: Record<string, ec2.InterfaceVpcEndpointAwsService> = {
    Ssm: ec2.InterfaceVpcEndpointAwsService.SSM,
    SsmMessages: ec2.InterfaceVpcEndpointAwsService.SSM_MESSAGES,
    Ec2Messages: ec2.InterfaceVpcEndpointAwsService.EC2_MESSAGES,
    Logs: ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    // target snapshot: the data plane's PutSnapshotBlock/CompleteSnapshot/GetSnapshotBlock/ListSnapshotBlocks
    // (com.amazonaws.<region>.ebs; private DNS makes ebs.<region>.amazonaws.com resolve to it). Its cost is in
    // docs/deploy.md ("What the stack creates").
    Ebs: ec2.InterfaceVpcEndpointAwsService.EBS_DIRECT,
  };
  // One security group for the five interface endpoints: HTTPS from the VPC, so the transfer instances'
  // group can name it as its only destination besides S3.
  const endpointSecurityGroup = new ec2.SecurityGroup(vpc, 'EndpointSecurityGroup', {
    vpc,
    description:
      'ebs-snapshot-compactor interface endpoints (SSM, SSM messages, EC2 messages, Logs, EBS direct): HTTPS in',
    allowAllOutbound: false,
  });
  endpointSecurityGroup.addIngressRule(
    ec2.Peer.ipv4(vpc.vpcCidrBlock),
    ec2.Port.tcp(443),
    'HTTPS from the VPC',
  );
  for (const [id, service] of Object.entries(endpoints)) {
    vpc.addInterfaceEndpoint(`${id}Endpoint`, {
      service,
      privateDnsEnabled: true,
      securityGroups: [endpointSecurityGroup],
      open: false,
    });
  }
  ENDPOINTS.set(vpc, {
    endpointSecurityGroup,
    s3PrefixListId: s3PrefixListId(vpc, settings.logRetentionDays as logs.RetentionDays),
  });
  return { vpc, subnetIds: vpc.isolatedSubnets.map((subnet) => subnet.subnetId), createdVpc: vpc };
}

/** What the transfer instances of a stack-created VPC may reach: the endpoints and S3 (gateway). */
export interface TransferEgress {
  readonly endpointSecurityGroup: ec2.ISecurityGroup;
  /** The managed prefix list com.amazonaws.<region>.s3 the S3 gateway endpoint routes. */
  readonly s3PrefixListId: string;
}

const ENDPOINTS = new WeakMap<ec2.IVpc, TransferEgress>();

/** Set for a VPC transferNetwork created; undefined for the user's VPC (docs/deploy.md: what to allow). */
export function transferEgress(vpc: ec2.IVpc): TransferEgress | undefined {
  return ENDPOINTS.get(vpc);
}

/**
 * CloudFormation has no attribute or resource that yields the id of the AWS-managed S3 prefix list (the
 * gateway endpoint does not return it), and a synth-time lookup would need credentials. The least bad
 * offline way: one DescribeManagedPrefixLists call at deploy time (AwsCustomResource; its function runs
 * only while CloudFormation creates or updates the stack).
 */
function s3PrefixListId(scope: Construct, logRetention: logs.RetentionDays): string {
  const stack = Stack.of(scope);
  // Its own log group with the stack's retention, deleted with the stack (else Lambda makes one that never expires).
  const logGroup = new logs.LogGroup(scope, 'S3PrefixListLookupLogs', {
    retention: logRetention,
    removalPolicy: RemovalPolicy.DESTROY,
  });
  const name = `com.amazonaws.${stack.region}.s3`;
  const lookup = new cr.AwsCustomResource(scope, 'S3PrefixListLookup', {
    onUpdate: {
      service: 'EC2',
      action: 'describeManagedPrefixLists',
      parameters: { Filters: [{ Name: 'prefix-list-name', Values: [name] }] },
      physicalResourceId: cr.PhysicalResourceId.of(`s3-prefix-list-${stack.region}`),
      outputPaths: ['PrefixLists.0.PrefixListId'],
    },
    policy: cr.AwsCustomResourcePolicy.fromSdkCalls({ resources: cr.AwsCustomResourcePolicy.ANY_RESOURCE }),
    installLatestAwsSdk: false,
    logGroup,
  });
  return lookup.getResponseField('PrefixLists.0.PrefixListId');
}
