import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { App, Validations } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { CompactorStack } from '../../lib/compactor-stack';
import { checkWithCdkNag } from '../../lib/nag-acknowledgements';
import { readSettings } from '../../lib/settings';
import { withCdkJsonContext } from './cdk-json';
import { synthTemplate } from './support';

const PIPELINE = 'arn:aws:imagebuilder:us-east-1:111122223333:image-pipeline/golden-al2023';
const OTHER_PIPELINE = 'arn:aws:imagebuilder:us-east-1:111122223333:image-pipeline/web';
const HANDLER = 'compactor.handlers.start_from_image_builder.handler';

interface Statement {
  Sid?: string;
  Effect: string;
  Action: string | string[];
  Resource: unknown;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Resource = { [key: string]: any };

function imageBuilderRules(template: Template): Record<string, Resource> {
  return Object.fromEntries(
    Object.entries(template.findResources('AWS::Events::Rule')).filter(([, rule]) =>
      JSON.stringify(rule.Properties.EventPattern ?? {}).includes('aws.imagebuilder'),
    ),
  );
}

function triggerFunctions(template: Template): Record<string, Resource> {
  return template.findResources('AWS::Lambda::Function', { Properties: { Handler: HANDLER } });
}

describe('no imageBuilderPipelineArns (the default)', () => {
  const template = synthTemplate();

  test('no Image Builder rule, function or role', () => {
    expect(imageBuilderRules(template)).toEqual({});
    expect(triggerFunctions(template)).toEqual({});
    expect(JSON.stringify(template.toJSON())).not.toContain('imagebuilder:');
  });
});

describe('imageBuilderPipelineArns set', () => {
  const template = synthTemplate({ imageBuilderPipelineArns: [PIPELINE, OTHER_PIPELINE] });

  test('a rule on Image Builder images that became AVAILABLE invokes start_from_image_builder with the whole event', () => {
    const rules = Object.values(imageBuilderRules(template));
    expect(rules).toHaveLength(1);
    const rule = rules[0].Properties as { EventPattern: unknown; Targets: Record<string, unknown>[] };
    expect(rule.EventPattern).toEqual({
      source: ['aws.imagebuilder'],
      'detail-type': ['EC2 Image Builder Image State Change'],
      // an image set back to AVAILABLE (from DEPRECATED or DISABLED) is not a new build: not compacted again
      detail: {
        state: { status: ['AVAILABLE'] },
        'previous-state': {
          status: ['PENDING', 'CREATING', 'BUILDING', 'TESTING', 'DISTRIBUTING', 'INTEGRATING'],
        },
      },
    });
    expect(rule.Targets).toHaveLength(1);
    expect(rule.Targets[0]).toEqual(
      expect.objectContaining({
        Arn: { 'Fn::GetAtt': [expect.stringMatching(/^TriggersImageBuilderStartFromImageBuilder/), 'Arn'] },
        DeadLetterConfig: { Arn: { 'Fn::GetAtt': [expect.stringMatching(/^TriggersDeadLetters/), 'Arn'] } },
        RetryPolicy: { MaximumRetryAttempts: 8, MaximumEventAgeInSeconds: 7200 },
      }),
    );
    expect([rule.Targets[0].Input, rule.Targets[0].InputPath, rule.Targets[0].InputTransformer]).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    template.hasResourceProperties('AWS::Lambda::Permission', {
      Action: 'lambda:InvokeFunction',
      Principal: 'events.amazonaws.com',
      FunctionName: {
        'Fn::GetAtt': [Match.stringLikeRegexp('^TriggersImageBuilderStartFromImageBuilder'), 'Arn'],
      },
    });
  });

  test('the function gets the pipelines, copySharing (default true) and the state machine, nothing else', () => {
    const functions = Object.values(triggerFunctions(template));
    expect(functions).toHaveLength(1);
    const env = (functions[0].Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env).toEqual({
      STATE_MACHINE_ARN: { Ref: expect.stringMatching(/^WorkflowStateMachine/) },
      IMAGE_BUILDER_PIPELINE_ARNS: `${PIPELINE},${OTHER_PIPELINE}`,
      IMAGE_BUILDER_COPY_SHARING: 'true',
      POWERTOOLS_SERVICE_NAME: 'ebs-snapshot-compactor',
      POWERTOOLS_METRICS_NAMESPACE: 'EbsSnapshotCompactor',
      LOG_LEVEL: 'INFO',
    });
    const off = synthTemplate({ imageBuilderPipelineArns: PIPELINE, imageBuilderCopySharing: false });
    const offEnv = (
      Object.values(triggerFunctions(off))[0].Properties.Environment as { Variables: Record<string, unknown> }
    ).Variables;
    expect(offEnv.IMAGE_BUILDER_COPY_SHARING).toBe('false');
    expect(offEnv.IMAGE_BUILDER_PIPELINE_ARNS).toBe(PIPELINE);
  });

  test("its own role: GetImage on this account and Region's images, start and find executions, its logs", () => {
    const roles = template.findResources('AWS::IAM::Role', {
      Properties: { Description: Match.stringLikeRegexp('Image Builder trigger') },
    });
    expect(Object.keys(roles)).toHaveLength(1);
    const roleId = Object.keys(roles)[0];
    const statements = Object.values(template.findResources('AWS::IAM::Policy'))
      .filter((p) => (p.Properties.Roles as { Ref: string }[]).some((r) => r.Ref === roleId))
      .flatMap((p) => p.Properties.PolicyDocument.Statement as Statement[]);
    const byAction = Object.fromEntries(
      statements.map((s) => [(Array.isArray(s.Action) ? s.Action : [s.Action]).sort().join(','), s]),
    );
    expect(Object.keys(byAction).sort()).toEqual(
      [
        'imagebuilder:GetImage',
        'logs:CreateLogStream,logs:PutLogEvents',
        'sqs:GetQueueAttributes,sqs:GetQueueUrl,sqs:SendMessage',
        'states:DescribeExecution',
        'states:StartExecution',
        'xray:PutTelemetryRecords,xray:PutTraceSegments',
      ].sort(),
    );
    expect(statements.every((s) => s.Effect === 'Allow')).toBe(true);
    expect(JSON.stringify(byAction['imagebuilder:GetImage'].Resource)).toMatch(
      /"arn:",\{"Ref":"AWS::Partition"\},":imagebuilder:",\{"Ref":"AWS::Region"\},":",\{"Ref":"AWS::AccountId"\},":image\/\*\/\*\/\*"/,
    );
    expect(byAction['states:StartExecution'].Resource).toEqual({
      Ref: expect.stringMatching(/^WorkflowStateMachine/),
    });
    expect(JSON.stringify(byAction['states:DescribeExecution'].Resource)).toMatch(
      /:execution:.*WorkflowStateMachine.*Name.*:\*/,
    );
  });

  test('an event the function fails on is kept: Lambda retries it twice, then sends it to the dead-letter queue', () => {
    const [fnId] = Object.keys(triggerFunctions(template));
    template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      FunctionName: { Ref: fnId },
      MaximumRetryAttempts: 2,
      MaximumEventAgeInSeconds: 21600,
      DestinationConfig: {
        OnFailure: { Destination: { 'Fn::GetAtt': [Match.stringLikeRegexp('^TriggersDeadLetters'), 'Arn'] } },
      },
    });
    const alarms = Object.values(template.findResources('AWS::CloudWatch::Alarm')).filter(
      (a) => a.Properties.MetricName === 'Errors' && JSON.stringify(a.Properties.Dimensions).includes(fnId),
    );
    expect(alarms).toHaveLength(1);
    expect(alarms[0].Properties).toMatchObject({ Namespace: 'AWS/Lambda', Statistic: 'Sum', Period: 300 });
  });

  test('a pipeline of another Region or account is refused: at synth with a known environment, else by a deploy-time rule', () => {
    const rules = template.toJSON().Rules as Record<string, { Assertions: Resource[] }>;
    const assertions = Object.entries(rules)
      .filter(([id]) => id.startsWith('TriggersImageBuilderPipelinesInThisRegionAndAccount'))
      .flatMap(([, r]) => r.Assertions);
    expect(assertions).toHaveLength(4); // Region and account of each of the two pipelines
    expect(assertions).toContainEqual({
      Assert: { 'Fn::Equals': ['us-east-1', { Ref: 'AWS::Region' }] },
      AssertDescription: expect.stringContaining(`${PIPELINE} is not in this stack's Region`),
    });
    expect(assertions).toContainEqual({
      Assert: { 'Fn::Equals': ['111122223333', { Ref: 'AWS::AccountId' }] },
      AssertDescription: expect.stringContaining(`${PIPELINE} is not in this stack's account`),
    });
    const inEnv = (region: string, account: string) => () => {
      const app = new App({ context: withCdkJsonContext({ imageBuilderPipelineArns: [PIPELINE] }) });
      new CompactorStack(app, 'InEnv', { settings: readSettings(app.node), env: { region, account } });
    };
    expect(inEnv('eu-west-1', '111122223333')).toThrow(/is in Region us-east-1, not this stack's eu-west-1/);
    expect(inEnv('us-east-1', '444455556666')).toThrow(
      /is in account 111122223333, not this stack's 444455556666/,
    );
    expect(inEnv('us-east-1', '111122223333')).not.toThrow();
  });

  test('a pipeline ARN that is not one is refused at synth', () => {
    expect(() =>
      synthTemplate({ imageBuilderPipelineArns: ['arn:aws:imagebuilder:us-east-1:1:image/x/1.0.0/1'] }),
    ).toThrow(/imageBuilderPipelineArns/);
  });

  test('cdk-nag finds nothing unacknowledged in the trigger (its findings acknowledged with reasons)', () => {
    const outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'nag-ib-'));
    const app = new App({ outdir, context: withCdkJsonContext({ imageBuilderPipelineArns: [PIPELINE] }) });
    checkWithCdkNag(app);
    const stack = new CompactorStack(app, 'NagImageBuilder', { settings: readSettings(app.node) });
    try {
      app.synth();
    } catch (error) {
      if ((error as Error).name !== 'ValidationFailed') throw error;
    }
    // Only this construct's resources: other parts of the stack have tests of their own (nag.test.ts).
    const reportFile = path.join(outdir, 'validation-report.json');
    interface Violation {
      ruleName: string;
      violatingConstructs: { constructPath: string }[];
    }
    const report = JSON.parse(fs.readFileSync(reportFile, 'utf8')) as {
      pluginReports: { violations: Violation[]; suppressedViolations: Violation[] }[];
    };
    fs.rmSync(outdir, { recursive: true, force: true });
    const mine = (violations: Violation[]): string[] =>
      violations
        .filter((v) => v.violatingConstructs.some((c) => c.constructPath.includes('/Triggers/ImageBuilder/')))
        .map((v) => v.ruleName);
    expect(report.pluginReports.flatMap((r) => mine(r.violations))).toEqual([]);
    // every acknowledgement is used: each covers a finding cdk-nag made here
    expect(new Set(report.pluginReports.flatMap((r) => mine(r.suppressedViolations)))).toEqual(
      new Set([
        'AwsSolutions-L1',
        'AwsSolutions-IAM5[Resource::*]',
        'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:imagebuilder:<AWS::Region>:<AWS::AccountId>:image/*/*/*]',
        expect.stringMatching(
          /^AwsSolutions-IAM5\[Resource::.*:execution:<WorkflowStateMachine\w+\.Name>:\*\]$/,
        ),
      ]),
    );
    const acknowledged = stack.node
      .findAll()
      .filter((c) => c.node.path.includes('/Triggers/ImageBuilder/'))
      .flatMap((c) =>
        c.node.metadata
          .filter((m) => m.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
          .flatMap((m) => Object.entries(m.data as Record<string, string>)),
      );
    const rules = acknowledged.map(([id]) =>
      id.replace('AwsSolutions::AwsSolutions-', '').replace(/\[.*/, ''),
    );
    expect(rules.sort()).toEqual(['IAM5', 'IAM5', 'IAM5', 'L1']);
    expect(acknowledged.every(([, reason]) => reason.length > 40)).toBe(true);
  });
});
