import { Fn } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
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
 * instances need only the SSM and CloudWatch Logs APIs (interface endpoints) and S3 (gateway endpoint,
 * free; AL2023 repositories and SSM agent updates live in S3), so there is no NAT gateway.
 */
export function transferNetwork(scope: Construct, settings: Settings): TransferNetwork {
  if (settings.vpcId !== undefined && settings.subnetIds !== undefined) {
    // No lookup: synth stays offline; the subnets are only passed on to RunInstances and IAM conditions.
    const vpc = ec2.Vpc.fromVpcAttributes(scope, 'Vpc', {
      vpcId: settings.vpcId,
      availabilityZones: Fn.getAzs(),
    });
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
  };
  for (const [id, service] of Object.entries(endpoints)) {
    vpc.addInterfaceEndpoint(`${id}Endpoint`, { service, privateDnsEnabled: true });
  }
  return { vpc, subnetIds: vpc.isolatedSubnets.map((subnet) => subnet.subnetId), createdVpc: vpc };
}
