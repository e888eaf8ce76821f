/**
 * target snapshot (issue #11): what the task role may do to start a direct snapshot, the tag keys the
 * policies condition on (the same as the Lambdas put), and the `ebs` interface endpoint of the stack's VPC.
 * The transfer instance's grants: test/cdk/instance-policy.test.ts.
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { Template } from 'aws-cdk-lib/assertions';
import {
  DELIVERED_TAG,
  DELIVERED_VALUE,
  EXECUTION_TAG,
  ROLE_TAG,
  SNAPSHOT_ROLE,
  STACK_TAG,
  WRITER_INSTANCE_TAG,
} from '../../lib/tags';
import { EBS_DIRECT_KMS_ACTIONS } from '../../lib/task-role';
import { synthTemplate, taskRoleStatements } from './support';

type Statement = { Sid?: string; Action: string | string[]; Resource: unknown; Condition?: unknown };

const asList = (value: string | string[]): string[] => (Array.isArray(value) ? value : [value]);

function taskStatements(template: Template): Statement[] {
  return taskRoleStatements<Statement>(template);
}

const bySid = (statements: Statement[], sid: string): Statement => {
  const found = statements.filter((s) => s.Sid === sid);
  expect(found).toHaveLength(1);
  return found[0];
};

const SNAPSHOTS_OF_THE_REGION = {
  'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':ec2:', { Ref: 'AWS::Region' }, '::snapshot/*']],
};
const via = (service: string) => ({
  'Fn::Join': ['', [`${service}.`, { Ref: 'AWS::Region' }, '.', { Ref: 'AWS::URLSuffix' }]],
});
const NEW_SNAPSHOT_REQUEST_TAGS = {
  StringEquals: {
    [`aws:RequestTag/${STACK_TAG}`]: 'EbsSnapshotCompactor',
    [`aws:RequestTag/${ROLE_TAG}`]: SNAPSHOT_ROLE,
  },
  Null: { [`aws:RequestTag/${EXECUTION_TAG}`]: 'false' },
};

describe('task role: starting direct snapshots', () => {
  const template = synthTemplate();
  const statements = taskStatements(template);

  test('ebs:StartSnapshot only with the stack, an execution and role snapshot as request tags, and no parent', () => {
    const starts = statements.filter((s) => asList(s.Action).includes('ebs:StartSnapshot'));
    expect(starts.map((s) => s.Sid)).toEqual(['StartTheStacksDirectSnapshots']);
    expect(starts[0]).toEqual({
      Sid: 'StartTheStacksDirectSnapshots',
      Effect: 'Allow',
      Action: 'ebs:StartSnapshot',
      Resource: SNAPSHOTS_OF_THE_REGION,
      Condition: {
        ...NEW_SNAPSHOT_REQUEST_TAGS,
        Null: { ...NEW_SNAPSHOT_REQUEST_TAGS.Null, 'ebs:ParentSnapshot': 'true' },
      },
    });
  });

  test("StartSnapshot's tags (ec2:CreateTags) on the same request tags only", () => {
    expect(bySid(statements, 'TagDirectSnapshotsWhileStarting')).toEqual({
      Sid: 'TagDirectSnapshotsWhileStarting',
      Effect: 'Allow',
      Action: 'ec2:CreateTags',
      Resource: SNAPSHOTS_OF_THE_REGION,
      Condition: NEW_SNAPSHOT_REQUEST_TAGS,
    });
  });

  test('an encrypted direct snapshot: the EBS direct KMS actions on the kmsKeyArns keys, only via EBS', () => {
    const kms = bySid(statements, 'StartEncryptedDirectSnapshotsThroughEbs');
    expect(asList(kms.Action)).toEqual(EBS_DIRECT_KMS_ACTIONS);
    expect(kms.Condition).toEqual({
      StringEquals: { 'kms:ViaService': [via('ec2'), via('ebs'), via('ebs-fips')] },
    });
    // the same keys the role may use through EC2 for target volumes
    expect(kms.Resource).toEqual(bySid(statements, 'UseKeysOnlyThroughEc2').Resource);
  });

  test('no KMS action of the role is usable other than through EC2 or EBS (DescribeKey aside)', () => {
    for (const statement of statements) {
      const kmsActions = asList(statement.Action).filter(
        (a) => a.startsWith('kms:') && a !== 'kms:DescribeKey',
      );
      if (kmsActions.length === 0) continue;
      expect(JSON.stringify(statement.Condition)).toMatch(/"kms:ViaService"/);
    }
  });
});

describe('the tag keys the policies condition on', () => {
  const tagsPy = readFileSync(path.join(__dirname, '../../lambdas/compactor/tags.py'), 'utf8');
  const pyConstant = (name: string): string => {
    const match = new RegExp(`^${name} = (.+)$`, 'm').exec(tagsPy);
    if (!match) throw new Error(`${name} not found in lambdas/compactor/tags.py`);
    const prefix = /^PREFIX = "([^"]+)"$/m.exec(tagsPy)![1];
    return match[1]
      .replace(/^PREFIX \+ /, prefix)
      .replace(/"/g, '')
      .trim();
  };

  test('are the ones lambdas/compactor/tags.py puts', () => {
    expect({
      STACK_TAG,
      EXECUTION_TAG,
      ROLE_TAG,
      SNAPSHOT_ROLE,
      DELIVERED_TAG,
      DELIVERED_VALUE,
      WRITER_INSTANCE_TAG,
    }).toEqual({
      STACK_TAG: pyConstant('STACK'),
      EXECUTION_TAG: pyConstant('EXECUTION'),
      ROLE_TAG: pyConstant('ROLE'),
      SNAPSHOT_ROLE: pyConstant('ROLE_SNAPSHOT'),
      DELIVERED_TAG: pyConstant('DELIVERED'),
      DELIVERED_VALUE: pyConstant('DELIVERED_VALUE'),
      WRITER_INSTANCE_TAG: pyConstant('WRITER_INSTANCE'),
    });
  });
});

describe('the EBS direct APIs endpoint', () => {
  test("the stack's VPC: an interface endpoint com.amazonaws.<region>.ebs, private DNS, in its subnets, HTTPS from the VPC only", () => {
    const template = synthTemplate();
    const endpoints = Object.entries(template.findResources('AWS::EC2::VPCEndpoint')).filter(([, e]) =>
      JSON.stringify(e.Properties.ServiceName).includes('.ebs"'),
    );
    expect(endpoints).toHaveLength(1);
    const endpoint = endpoints[0][1].Properties;
    expect(endpoint.ServiceName).toEqual({
      'Fn::Join': ['', ['com.amazonaws.', { Ref: 'AWS::Region' }, '.ebs']],
    });
    expect(endpoint).toMatchObject({ VpcEndpointType: 'Interface', PrivateDnsEnabled: true });
    const subnets = Object.keys(template.findResources('AWS::EC2::Subnet')).sort();
    expect(endpoint.SubnetIds.map((s: { Ref: string }) => s.Ref).sort()).toEqual(subnets);
    const [groupId] = endpoint.SecurityGroupIds.map(
      (g: { 'Fn::GetAtt': [string, string] }) => g['Fn::GetAtt'][0],
    );
    const group = template.findResources('AWS::EC2::SecurityGroup')[groupId].Properties;
    const [vpcId] = Object.keys(template.findResources('AWS::EC2::VPC'));
    expect(group.SecurityGroupIngress).toEqual([
      {
        CidrIp: { 'Fn::GetAtt': [vpcId, 'CidrBlock'] },
        Description: 'HTTPS from the VPC',
        FromPort: 443,
        IpProtocol: 'tcp',
        ToPort: 443,
      },
    ]);
  });

  test("the user's VPC (vpcId): no endpoint is created (docs/deploy.md: its subnets must reach ebs.<region>.amazonaws.com)", () => {
    const template = synthTemplate({
      vpcId: 'vpc-0123456789abcdef0',
      subnetIds: 'subnet-0123456789abcdef0,subnet-0fedcba9876543210',
    });
    template.resourceCountIs('AWS::EC2::VPCEndpoint', 0);
    const deploy = readFileSync(path.join(__dirname, '../../docs/deploy.md'), 'utf8');
    expect(deploy).toContain('ebs.<region>.amazonaws.com');
  });
});
