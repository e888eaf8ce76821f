import { Match, Template } from 'aws-cdk-lib/assertions';
import { BATCH_STATES, START_EXECUTION_RETRY_ERRORS } from '../../lib/batch-workflow';
import { TASK_TABLE } from '../../lib/workflow-building-blocks';
import {
  AslState,
  FUNCTION_ARN_PREFIX,
  stateMachineDefinition,
  synthTemplate,
  taskModule,
  taskRoleStatementsByModule,
} from './support';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

type Statement = {
  Sid?: string;
  Action: string | string[];
  Resource: unknown;
  Condition?: Record<string, Record<string, unknown>>;
};

/** The batch Map state as rendered (the fields AslState does not name). */
interface MapState extends AslState {
  ItemsPath: string;
  MaxConcurrencyPath: string;
  ToleratedFailurePercentagePath: string;
  ResultWriter: { Resource: string; Parameters: Record<string, string> };
  ItemProcessor: {
    ProcessorConfig: { Mode: string; ExecutionType: string };
    StartAt: string;
    States: Record<string, AslState & { ResultSelector?: Record<string, string> }>;
  };
}

const SYNC_2 = 'arn:aws:states:::states:startExecution.sync:2';

function actionsOf(statement: Statement): string[] {
  return typeof statement.Action === 'string' ? [statement.Action] : statement.Action;
}

/** The statements of every AWS::IAM::Policy / inline policy of the role whose logical id starts so. */
function policyStatementsOfRole(template: Template, roleIdStart: string): Statement[] {
  const policies = Object.values(template.findResources('AWS::IAM::Policy')).filter((policy) =>
    (policy.Properties.Roles as { Ref: string }[]).some((r) => r.Ref.startsWith(roleIdStart)),
  );
  return policies.flatMap((policy) => policy.Properties.PolicyDocument.Statement as Statement[]);
}

/** tasks.json payload → the Parameters CDK renders (`$...` → key.$, null → a JSON null intrinsic). */
function aslParameters(payload: Json): Json {
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return payload;
  return Object.fromEntries(
    Object.entries(payload).map(([key, value]) => {
      if (value === null) return [`${key}.$`, "States.StringToJson('null')"];
      if (typeof value === 'string' && value.startsWith('$')) return [`${key}.$`, value];
      return [key, aslParameters(value)];
    }),
  );
}

const template = synthTemplate();
const definition = stateMachineDefinition(template, 'Batch');
const states = definition.States;
const map = states[BATCH_STATES.map] as MapState;
const processor = map.ItemProcessor.States;
const workflowRef = (text: unknown) => /^REF\(WorkflowStateMachine[0-9A-F]{8}\)$/.test(String(text));

describe('batch state machine definition', () => {
  test("every Task state is contract/tasks.json's (stateMachine batch): module, payload, result path", () => {
    const table = TASK_TABLE.flatMap((task) =>
      task.states.filter((s) => s.stateMachine === 'batch').map((s) => [s.state, task.module, s] as const),
    );
    expect(table.map(([name, module]) => [name, module])).toEqual([
      ['Resolve batch', 'resolve_batch'],
      ['Summarize batch', 'summarize_batch'],
      ['Summarize failed batch', 'summarize_batch'],
    ]);
    const lambdaTasks = Object.entries(states).filter(([, s]) => s.Type === 'Task');
    expect(lambdaTasks.map(([name]) => name).sort()).toEqual(table.map(([name]) => name).sort());
    for (const [name, module, entry] of table) {
      const state = states[name];
      expect(state.Resource).toMatch(new RegExp(`^${FUNCTION_ARN_PREFIX}Tasks`));
      expect({ name, module: taskModule(template, state), parameters: state.Parameters }).toEqual({
        name,
        module,
        parameters: aslParameters(entry.payload as Json),
      });
      expect(state.ResultPath).toBe(entry.resultPath);
      // Lambda service errors and TransientAwsError are retried; anything else ends the batch
      expect(state.Retry!.map((r) => r.ErrorEquals).flat()).toContain('TransientAwsError');
      expect(state.Catch).toEqual([
        { ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: 'Batch step failed' },
      ]);
    }
    expect(states['Batch step failed']).toMatchObject({
      Type: 'Fail',
      ErrorPath: '$.error.Error',
      CausePath: '$.error.Cause',
    });
  });

  test('Resolve batch → the Map → Summarize batch → Succeed with the summary as the output', () => {
    expect(definition.StartAt).toBe('Resolve batch');
    expect(states['Resolve batch'].Next).toBe('Compact each item');
    expect(map.Next).toBe('Summarize batch');
    expect(states['Summarize batch'].Next).toBe('Batch done');
    expect(states['Batch done']).toEqual({ Type: 'Succeed', OutputPath: '$.summary' });
    expect(states['Summarize batch'].Parameters).toMatchObject({ 'map.$': '$.map' });
  });

  test('a failed Map is summarized all the same, then the execution fails with the Map error', () => {
    expect(map.Catch).toEqual([
      { ErrorEquals: ['States.ALL'], ResultPath: '$.mapError', Next: 'Summarize failed batch' },
    ]);
    expect(states['Summarize failed batch'].Parameters).toMatchObject({ 'mapError.$': '$.mapError' });
    expect(states['Summarize failed batch'].Next).toBe('Batch failed');
    expect(states['Batch failed']).toMatchObject({
      Type: 'Fail',
      ErrorPath: '$.mapError.Error',
      CausePath: '$.mapError.Cause',
    });
  });

  test('a Distributed Map of STANDARD child workflows over $.batch.items, limits read from $.batch', () => {
    expect(map.Type).toBe('Map');
    expect(map.ItemProcessor.ProcessorConfig).toEqual({ Mode: 'DISTRIBUTED', ExecutionType: 'STANDARD' });
    expect(map.ItemsPath).toBe('$.batch.items');
    expect(map.MaxConcurrencyPath).toBe('$.batch.maxConcurrency');
    expect(map.ToleratedFailurePercentagePath).toBe('$.batch.toleratedFailurePercentage');
    expect(map.ResultPath).toBe('$.map');
    // each iteration's input is the item itself (no ItemSelector): H2's results parser relies on it
    expect(map).not.toHaveProperty('ItemSelector');
    expect(map).not.toHaveProperty('MaxConcurrency');
    expect(map).not.toHaveProperty('ToleratedFailurePercentage');
  });

  test('the ResultWriter puts the results in the batch results bucket under batches/<map run id>/', () => {
    expect(map.ResultWriter.Resource).toBe('arn:aws:states:::s3:putObject');
    expect(Object.keys(map.ResultWriter.Parameters).sort()).toEqual(['Bucket', 'Prefix']);
    expect(map.ResultWriter.Parameters.Bucket).toMatch(/^REF\(BatchResultsBucket[0-9A-F]{8}\)$/);
    // no trailing slash: Step Functions adds `/<map run id>/`
    expect(map.ResultWriter.Parameters.Prefix).toBe('batches');
    expect(map.ResultWriter).not.toHaveProperty('WriterConfig');
  });
});

describe('batch item processor', () => {
  test('the child executions: startExecution.sync:2 of the compaction workflow, named by the item', () => {
    for (const [name, namePath, inputPath, resultPath] of [
      ['Compact', '$.childName', '$.input', '$.compacted'],
      ['Estimate', '$.estimate.name', '$.estimate.input', '$.estimated'],
    ]) {
      const state = processor[name];
      expect(state.Type).toBe('Task');
      expect(state.Resource).toBe(SYNC_2);
      expect(workflowRef(state.Parameters!.StateMachineArn)).toBe(true);
      expect(state.Parameters!['Name.$']).toBe(namePath);
      expect(state.Parameters!['Input.$']).toBe(`States.JsonMerge(${inputPath}, $.startedBy, false)`);
      expect(state.ResultPath).toBe(resultPath);
      expect(state.ResultSelector).toEqual({
        'Output.$': '$.Output',
        'ExecutionArn.$': '$.ExecutionArn',
        'Status.$': '$.Status',
        'StartDate.$': '$.StartDate',
        'StopDate.$': '$.StopDate',
      });
      // retried on throttling only; a failed child fails the iteration (no Catch), which the Map counts
      expect(state.Retry!.map((r) => r.ErrorEquals)).toEqual([START_EXECUTION_RETRY_ERRORS]);
      expect(START_EXECUTION_RETRY_ERRORS.every((e) => /Throttling|ExecutionLimitExceeded/.test(e))).toBe(
        true,
      );
      // Step Functions names the SDK exception class (StepFunctions.<Name>Exception); the short spelling too
      expect([...START_EXECUTION_RETRY_ERRORS].sort()).toEqual(
        [
          'StepFunctions.ThrottlingException',
          'StepFunctions.ExecutionLimitExceeded',
          'StepFunctions.ExecutionLimitExceededException',
        ].sort(),
      );
      expect(state.Catch).toBeUndefined();
    }
  });

  test('the children link back to their iteration (AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID)', () => {
    expect(map.ItemProcessor.StartAt).toBe('Started by this iteration');
    expect(processor['Started by this iteration']).toMatchObject({
      Type: 'Pass',
      Parameters: { 'AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID.$': '$$.Execution.Id' },
      ResultPath: '$.startedBy',
      Next: 'Estimate first?',
    });
  });

  test('a dry run first when the item has an estimate; compacted only when it promises minSavingsPercent', () => {
    expect(processor['Estimate first?']).toEqual({
      Type: 'Choice',
      Choices: [{ Variable: '$.estimate.name', IsPresent: true, Next: 'Estimate' }],
      Default: 'Compact',
    });
    expect(processor.Estimate.Next).toBe('Worth compacting?');
    const savings = '$.estimated.Output.estimate.savingsPercent';
    expect(processor['Worth compacting?']).toEqual({
      Type: 'Choice',
      Choices: [
        {
          And: [
            { Variable: savings, IsPresent: true },
            { Variable: savings, IsNumeric: true },
            { Variable: savings, NumericGreaterThanEqualsPath: '$.estimate.minSavingsPercent' },
          ],
          Next: 'Compact',
        },
      ],
      Default: 'Not worth compacting',
    });
    expect(processor['Not worth compacting']).toMatchObject({
      Type: 'Pass',
      Result: true,
      ResultPath: '$.skipped',
      Next: 'Item done',
    });
    expect(processor.Compact.Next).toBe('Item done');
    expect(processor['Item done']).toEqual({ Type: 'Succeed' });
  });

  test('the names of BATCH_STATES are the states of the definition (the twin and the docs use them)', () => {
    const names = [...Object.keys(states), ...Object.keys(processor)].sort();
    expect(Object.values(BATCH_STATES).sort()).toEqual(names);
  });
});

describe('batch IAM', () => {
  const [roleId] = Object.keys(template.findResources('AWS::IAM::Role')).filter((id) =>
    id.startsWith('BatchStateMachineRole'),
  );
  const statements = policyStatementsOfRole(template, roleId);
  const withAction = (action: string) => statements.filter((s) => actionsOf(s).includes(action));

  test('it starts only the compaction workflow (and its own map runs) and watches and stops only their executions', () => {
    const starts = withAction('states:StartExecution').map((s) => s.Resource);
    expect(starts).toHaveLength(2);
    expect(starts).toContainEqual({ Ref: expect.stringMatching(/^WorkflowStateMachine/) });
    expect(starts).toContainEqual({ Ref: expect.stringMatching(/^BatchStateMachine[0-9A-F]{8}$/) });
    const describes = withAction('states:DescribeExecution');
    expect(describes).toHaveLength(2);
    for (const s of describes) {
      expect(actionsOf(s).sort()).toEqual(['states:DescribeExecution', 'states:StopExecution']);
      expect(JSON.stringify(s.Resource)).toMatch(/:execution:.*(WorkflowStateMachine|BatchStateMachine)/);
    }
    // .sync:2 waits through the managed EventBridge rule of Step Functions
    const rule = withAction('events:PutRule');
    expect(rule.map(actionsOf)).toEqual([['events:DescribeRule', 'events:PutRule', 'events:PutTargets']]);
    expect(JSON.stringify(rule[0].Resource)).toMatch(
      /rule\/StepFunctionsGetEventsForStepFunctionsExecutionRule"/,
    );
  });

  test('it invokes only the two batch functions and writes results only to the batch results bucket', () => {
    const invokes = withAction('lambda:InvokeFunction').flatMap((s) => s.Resource as unknown[]);
    expect(JSON.stringify(invokes)).toMatch(/TasksResolveBatch/);
    expect(JSON.stringify(invokes)).toMatch(/TasksSummarizeBatch/);
    expect(JSON.stringify(invokes)).not.toMatch(/TasksPrepare|TasksLaunch|TasksTeardown/);
    const s3 = statements.filter((s) => actionsOf(s).some((a) => a.startsWith('s3:')));
    expect(s3).toHaveLength(1);
    expect(actionsOf(s3[0]).sort()).toEqual([
      's3:AbortMultipartUpload',
      's3:GetObject',
      's3:ListMultipartUploadParts',
      's3:PutObject',
    ]);
    expect(JSON.stringify(s3[0].Resource)).toMatch(/"Ref":"BatchResultsBucket[0-9A-F]{8}"},"\/\*"/);
    expect(statements.some((s) => actionsOf(s).some((a) => a.startsWith('ec2:')))).toBe(false);
  });

  test("summarize_batch's role reads and writes batches/* of the results bucket and lists map runs of batch executions", () => {
    const task = taskRoleStatementsByModule<Statement>(template).summarize_batch;
    const bySid = Object.fromEntries(task.map((s) => [s.Sid, s]));
    expect(actionsOf(bySid.ReadBatchResultsAndWriteBatchReports).sort()).toEqual([
      's3:GetObject',
      's3:PutObject',
    ]);
    expect(bySid.ReadBatchResultsAndWriteBatchReports.Resource).toEqual({
      'Fn::Join': [
        '',
        [{ 'Fn::GetAtt': [expect.stringMatching(/^BatchResultsBucket/), 'Arn'] }, '/batches/*'],
      ],
    });
    // Unconditioned: S3 answers a missing manifest with 404 only to a caller that may list the bucket (a GetObject
    // carries no s3:prefix); test/twin/test_batch_manifest_access.py runs that case.
    expect(bySid.FindABatchsResultFiles.Condition).toBeUndefined();
    expect(bySid.FindABatchsResultFiles.Resource).toEqual({
      'Fn::GetAtt': [expect.stringMatching(/^BatchResultsBucket/), 'Arn'],
    });
    expect(actionsOf(bySid.FindAFailedBatchsMapRun)).toEqual(['states:ListMapRuns']);
    expect(JSON.stringify(bySid.FindAFailedBatchsMapRun.Resource)).toMatch(
      /:execution:EbsSnapshotCompactor-Batch:\*"/,
    );
  });

  test('a pipeline may start batches, watch and stop them, read batches/* and find the state machine', () => {
    const policies = Object.values(template.findResources('AWS::IAM::ManagedPolicy'));
    expect(policies).toHaveLength(1);
    const pipeline: Statement[] = policies[0].Properties.PolicyDocument.Statement;
    const bySid = Object.fromEntries(pipeline.map((s) => [s.Sid, s]));
    expect(bySid.StartBatches.Resource).toEqual({ Ref: expect.stringMatching(/^BatchStateMachine/) });
    expect(actionsOf(bySid.WatchAndStopBatches).sort()).toEqual([
      'states:DescribeExecution',
      'states:GetExecutionHistory',
      'states:StopExecution',
    ]);
    expect(JSON.stringify(bySid.WatchAndStopBatches.Resource)).toMatch(
      /:execution:.*BatchStateMachine.*Name.*:\*/,
    );
    expect(actionsOf(bySid.CountABatchsItems)).toEqual(['states:DescribeMapRun']);
    expect(JSON.stringify(bySid.CountABatchsItems.Resource)).toMatch(
      /:mapRun:EbsSnapshotCompactor-Batch\/\*"/,
    );
    expect(actionsOf(bySid.ReadBatchResults)).toEqual(['s3:GetObject']);
    expect(JSON.stringify(bySid.ReadBatchResults.Resource)).toMatch(/BatchResultsBucket.*\/batches\/\*/);
    expect(JSON.stringify(bySid.FindTheStateMachines.Resource)).toMatch(/BatchStateMachineArnParameter/);
  });
});

describe('batch wiring', () => {
  test('the state machine: fixed name <stack>-Batch, STANDARD, logs ALL, traced', () => {
    const machines = Object.entries(template.findResources('AWS::StepFunctions::StateMachine')).filter(
      ([id]) => id.startsWith('BatchStateMachine'),
    );
    expect(machines).toHaveLength(1);
    expect(machines[0][1].Properties).toMatchObject({
      StateMachineName: 'EbsSnapshotCompactor-Batch',
      StateMachineType: 'STANDARD',
      TracingConfiguration: { Enabled: true },
      LoggingConfiguration: { Level: 'ALL', IncludeExecutionData: true },
    });
  });

  test('an SSM parameter and outputs name the batch state machine and the results bucket', () => {
    template.hasResourceProperties('AWS::SSM::Parameter', {
      Name: '/ebs-snapshot-compactor/EbsSnapshotCompactor/batch-state-machine-arn',
      Value: { Ref: Match.stringLikeRegexp('^BatchStateMachine') },
    });
    template.hasOutput('BatchStateMachineArn', {
      Value: { Ref: Match.stringLikeRegexp('^BatchStateMachine') },
      Export: { Name: 'EbsSnapshotCompactor-BatchStateMachineArn' },
    });
    template.hasOutput('BatchResultsBucketName', {
      Value: { Ref: Match.stringLikeRegexp('^BatchResultsBucket') },
    });
  });

  test('the results bucket: SSE-S3, private, TLS only, batches/ expire after batchResultRetentionDays', () => {
    const rules = (t: Template) => {
      const [bucket] = Object.entries(t.findResources('AWS::S3::Bucket')).filter(([id]) =>
        id.startsWith('BatchResultsBucket'),
      );
      expect(bucket[1].Properties).toMatchObject({
        BucketEncryption: {
          ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }],
        },
        PublicAccessBlockConfiguration: { BlockPublicAcls: true, RestrictPublicBuckets: true },
      });
      return bucket[1].Properties.LifecycleConfiguration.Rules;
    };
    expect(rules(template)).toEqual([
      { Id: 'ExpireBatchResults', Prefix: 'batches/', Status: 'Enabled', ExpirationInDays: 30 },
      {
        Id: 'AbortIncompleteUploads',
        Status: 'Enabled',
        AbortIncompleteMultipartUpload: { DaysAfterInitiation: 1 },
      },
    ]);
    expect(rules(synthTemplate({ batchResultRetentionDays: '7' }))[0].ExpirationInDays).toBe(7);
    expect(() => synthTemplate({ batchResultRetentionDays: 0 })).toThrow(/batchResultRetentionDays/);
  });
});
