import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { App, Stack, Validations } from 'aws-cdk-lib';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { CompactorStack } from '../../lib/compactor-stack';
import { checkWithCdkNag } from '../../lib/nag-acknowledgements';
import { readSettings } from '../../lib/settings';
import { withCdkJsonContext } from './cdk-json';

interface Report {
  pluginReports: { pluginName: string; violations: { ruleName: string; severity: string }[] }[];
}

/** Synthesizes with cdk-nag; returns the violations (none when the synth passes validation). */
function nagViolations(
  context: Record<string, unknown>,
  build: (app: App) => void,
): { rule: string; severity: string }[] {
  const outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'nag-'));
  try {
    const app = new App({ outdir, context: withCdkJsonContext(context) });
    build(app);
    checkWithCdkNag(app);
    try {
      app.synth();
    } catch (error) {
      if ((error as Error).name !== 'ValidationFailed') throw error;
    }
    const reportFile = path.join(outdir, 'validation-report.json');
    if (!fs.existsSync(reportFile)) return [];
    const report = JSON.parse(fs.readFileSync(reportFile, 'utf8')) as Report;
    return report.pluginReports.flatMap((plugin) =>
      plugin.violations.map((v) => ({ rule: v.ruleName, severity: v.severity })),
    );
  } finally {
    fs.rmSync(outdir, { recursive: true, force: true });
  }
}

describe('cdk-nag AwsSolutions', () => {
  test.each([
    ['created VPC', {}],
    [
      'given VPC and subnets, listed keys',
      {
        vpcId: 'vpc-0123456789abcdef0',
        subnetIds: 'subnet-0123456789abcdef0',
        kmsKeyArns: 'arn:aws:kms:us-east-1:111122223333:key/abcd',
      },
    ],
  ])('%s: no unacknowledged error or warning', (_name, context) => {
    const violations = nagViolations(
      context,
      (app) => new CompactorStack(app, 'Nag', { settings: readSettings(app.node) }),
    );
    expect(violations).toEqual([]);
  });

  test('the check can fail: an unacknowledged finding is reported', () => {
    const violations = nagViolations({}, (app) => new sqs.Queue(new Stack(app, 'Bad'), 'Queue'));
    expect(violations.map((v) => v.rule)).toEqual(expect.arrayContaining(['AwsSolutions-SQS4']));
  });

  test('every acknowledgement names a rule and gives a reason', () => {
    const app = new App();
    new CompactorStack(app, 'Nag', { settings: readSettings(app.node) });
    const acknowledgements = app.node
      .findAll()
      .flatMap((construct) => construct.node.metadata)
      .filter((entry) => entry.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
      .flatMap((entry) => Object.entries(entry.data as Record<string, string>))
      .filter(([id]) => id.startsWith('AwsSolutions::'));
    expect(acknowledgements.length).toBeGreaterThan(10);
    for (const [id, reason] of acknowledgements) {
      expect(id).toMatch(/^AwsSolutions::AwsSolutions-[A-Z]+\d+/);
      expect({ id, reason: reason.length > 30 }).toEqual({ id, reason: true });
    }
  });
});
