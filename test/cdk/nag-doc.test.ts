import * as fs from 'fs';
import * as path from 'path';
import { App, Validations } from 'aws-cdk-lib';
import { CompactorStack } from '../../lib/compactor-stack';
import { readSettings } from '../../lib/settings';
import { withCdkJsonContext } from './cdk-json';

/**
 * docs/deploy.md ("cdk-nag acknowledgements") lists what lib/nag-acknowledgements.ts acknowledges: each
 * rule with its finding, where. This test reads the table and the acknowledgements the stack records on its
 * constructs (cdk.json's context; created and given VPC), and fails when one side has a row the other lacks.
 */

const DEPLOY_DOC = path.join(__dirname, '..', '..', 'docs', 'deploy.md');
const NAG = 'AwsSolutions::AwsSolutions-';

/** The doc's "where" for an acknowledged construct path and rule (first match wins). */
const WHERE: [string, RegExp, RegExp][] = [
  ['task roles', /^Nag\/TaskRoles\//, /./],
  ['instance role', /^Nag\/TransferInstance\/Role$/, /./],
  ['S3 prefix list lookup (created VPC)', /^Nag\/Vpc$/, /^IAM5/],
  ['S3 prefix list lookup (created VPC)', /^Nag\/AWS679f53fac002430cb0da5b7982bd2287$/, /./],
  ['created VPC', /^Nag\/Vpc$/, /^VPC7$/],
  ['created VPC endpoints', /^Nag\/Vpc$/, /^EC23$/],
  ['source block lists bucket', /^Nag\/SourceBlocksBucket\//, /./],
  ['task functions, `start_from_tag`', /^Nag\/(Tasks\/\w+|Triggers\/StartFromTag)$/, /^L1$/],
  ['state machine roles', /^Nag\/(Workflow|Workflow\/Attempt|Cleanup)\/StateMachine$/, /./],
  ['batch state machine role', /^Nag\/Batch\/StateMachine$/, /./],
  ['batch results bucket', /^Nag\/BatchResultsBucket\//, /./],
  ['`start_from_tag` role', /^Nag\/Triggers\/StartFromTagRole$/, /./],
  ['pipeline policy', /^Nag\/StartCompactionsPolicy$/, /./],
  ['dead-letter queue', /^Nag\/Triggers\/DeadLetters$/, /./],
  ['`sweep` function', /^Nag\/Operations\/Sweep$/, /^L1$/],
  ['`sweep` role', /^Nag\/Operations\/SweepRole$/, /./],
];

/**
 * cdk-nag's finding as the doc writes it: `Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:
 * volume/*` -> `volume/*`, `<TasksLaunchFC937514.Arn>:*` -> `<function.Arn>:*`, logical ids without their hash.
 */
function finding(detail: string): string {
  return detail
    .replace(/^(Resource|Action|Policy)::/, '')
    .replace(/^arn:<AWS::Partition>:iam::aws:policy\/(service-role\/)?/, '')
    .replace(/^arn:<AWS::Partition>:[a-z0-9-]+:(<AWS::Region>)?:(<AWS::AccountId>)?:/, '')
    .replace(/<Tasks\w+\.Arn>/g, '<function.Arn>')
    .replace(/\{"Fn::Select":\[6,\{"Fn::Split":\[":",\{"Ref":"(\w+?)[0-9A-F]{8}"\}\]\}\]\}/g, '<$1.Name>')
    .replace(/<(\w+?)[0-9A-F]{8}\.(\w+)>/g, '<$1.$2>')
    .replace(/<(\w+?)[0-9A-F]{8}>/g, '<$1>');
}

/** `where | RULE finding` for each acknowledgement recorded on the constructs of a stack built with `context`. */
function acknowledged(context: Record<string, unknown>): string[] {
  const app = new App({ context: withCdkJsonContext(context) });
  new CompactorStack(app, 'Nag', { settings: readSettings(app.node) });
  const rows = app.node.findAll().flatMap((construct) =>
    construct.node.metadata
      .filter((entry) => entry.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
      .flatMap((entry) => Object.keys(entry.data as Record<string, string>))
      .filter((id) => id.startsWith(NAG))
      .map((id) => {
        const [, rule, detail] = /^([A-Z]+\d+)(?:\[(.*)\])?$/.exec(id.slice(NAG.length)) ?? [];
        const where = WHERE.find(([, at, ruleIs]) => at.test(construct.node.path) && ruleIs.test(rule));
        const label = where ? where[0] : `(no doc label for ${construct.node.path})`;
        return `${label} | ${rule}${detail ? ` ${finding(detail)}` : ''}`;
      }),
  );
  return rows;
}

/** `where | RULE finding` for each rule and finding of the doc's table ("IAM5 `*`, `key/*`, L1" is three). */
function documented(): string[] {
  const text = fs.readFileSync(DEPLOY_DOC, 'utf8');
  const section = text.slice(text.indexOf('## cdk-nag acknowledgements'));
  const rows = section.split('\n').filter((line) => /^\| [A-Z]+\d+/.test(line));
  const entries = rows.flatMap((line) => {
    const [ruleCell, where] = line.split(' | ').map((cell) => cell.replace(/^\| /, '').trim());
    let rule = '';
    return ruleCell.split(/,\s*/).map((part) => {
      const [, name, code] = /^(?:([A-Z]+\d+))?\s*(?:`(.+)`)?$/.exec(part) ?? [];
      rule = name ?? rule;
      return `${where} | ${rule}${code ? ` ${code}` : ''}`;
    });
  });
  return [...new Set(entries)].sort();
}

describe('docs/deploy.md "cdk-nag acknowledgements" is what the stack acknowledges', () => {
  test('the table has a row for each acknowledgement and none other', () => {
    const created = acknowledged({});
    const given = acknowledged({ vpcId: 'vpc-0123456789abcdef0', subnetIds: 'subnet-0123456789abcdef0' });
    const code = [...new Set([...created, ...given])].sort();
    expect(given.filter((row) => !created.includes(row))).toEqual([]);
    expect(code.length).toBeGreaterThan(15);
    expect(documented()).toEqual(code);
  });

  test('the findings read as the doc writes them', () => {
    expect(
      finding(
        'Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<WorkflowStateMachine8F1B1C15.Name>:*',
      ),
    ).toBe('execution:<WorkflowStateMachine.Name>:*');
    expect(finding('Resource::<TasksTeardown516A8F72.Arn>:*')).toBe('<function.Arn>:*');
    expect(finding('Action::kms:ReEncrypt*')).toBe('kms:ReEncrypt*');
    // CDK's grants cut a state machine's name from its ARN; the bucket's own ARN by name
    expect(
      finding(
        'Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:{"Fn::Select":[6,{"Fn::Split":[":",{"Ref":"BatchStateMachineA1FF2995"}]}]}/*:*',
      ),
    ).toBe('execution:<BatchStateMachine.Name>/*:*');
    expect(finding('Resource::arn:<AWS::Partition>:s3:::<BatchResultsBucketD16A3323>/*')).toBe(
      '<BatchResultsBucket>/*',
    );
    expect(finding('Resource::arn:<AWS::Partition>:ec2:<AWS::Region>::image/*')).toBe('image/*');
  });
});
