import { Annotations } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as tasks from 'aws-cdk-lib/aws-stepfunctions-tasks';
import { Construct } from 'constructs';
import { BATCH_RESULTS_PREFIX } from './source-blocks-bucket';
import {
  ErrorRoute,
  retryStartExecution,
  START_EXECUTION_RETRY_ERRORS,
  WorkflowBuilder,
} from './workflow-building-blocks';

/** The batch state machine's name: fixed, `<stack name>-Batch` (at most 70 of the 80 characters allowed). */
export function batchStateMachineName(stackName: string): string {
  return `${stackName}-Batch`;
}

/** The state names other parts rely on (the twin runs this definition; docs/batch.md describes them). */
export const BATCH_STATES = {
  resolve: 'Resolve batch',
  map: 'Compact each item',
  summarize: 'Summarize batch',
  summarizeFailed: 'Summarize failed batch',
  succeeded: 'Batch done',
  mapFailed: 'Batch failed',
  stepFailed: 'Batch step failed',
  startedBy: 'Started by this iteration',
  estimateFirst: 'Estimate first?',
  estimate: 'Estimate',
  worthIt: 'Worth compacting?',
  notWorthIt: 'Not worth compacting',
  compact: 'Compact',
  itemDone: 'Item done',
} as const;

/** Re-exported for the batch's tests: the one list is the building blocks'. */
export { START_EXECUTION_RETRY_ERRORS };

/** What an iteration keeps of a child's DescribeExecution (sync:2 gives Output as JSON): small result files. */
const CHILD_RESULT = {
  Output: sfn.JsonPath.objectAt('$.Output'),
  ExecutionArn: sfn.JsonPath.stringAt('$.ExecutionArn'),
  Status: sfn.JsonPath.stringAt('$.Status'),
  StartDate: sfn.JsonPath.stringAt('$.StartDate'),
  StopDate: sfn.JsonPath.stringAt('$.StopDate'),
};

export interface BatchWorkflowProps {
  /** Fixed (batchStateMachineName), so the task role can name its executions (ListMapRuns) without a cycle. */
  readonly stateMachineName: string;
  /** The compaction state machine each item runs as a child execution. */
  readonly compaction: sfn.IStateMachine;
  /** resolve_batch and summarize_batch (contract/tasks.json, stateMachine "batch"). */
  readonly functions: Readonly<Record<string, lambda.IFunction>>;
  /** Where the Map's ResultWriter puts its files, under `batches/`. */
  readonly resultsBucket: s3.IBucket;
  readonly logGroup: logs.ILogGroup;
}

/**
 * The batch state machine: `Resolve batch` turns the batch input (contract/schemas/batch-input.schema.json)
 * into `$.batch` (items, maxConcurrency, toleratedFailurePercentage); the Distributed Map `Compact each item`
 * runs one child execution of the compaction workflow per item (startExecution.sync:2, the item's
 * deterministic name, optionally after a dry run that must promise minSavingsPercent), at most
 * `$.batch.maxConcurrency` at once; its ResultWriter puts every iteration's result in the results bucket.
 * `Summarize batch` writes the report and the execution ends with the summary; when the Map fails (more
 * failures than tolerated), `Summarize failed batch` still writes it and the execution fails with the Map's error.
 */
export class BatchWorkflow extends Construct {
  public readonly stateMachine: sfn.StateMachine;

  constructor(scope: Construct, id: string, props: BatchWorkflowProps) {
    super(scope, id);
    const b = new WorkflowBuilder(this, 'batch', props.functions);
    const stepFailed = new sfn.Fail(this, BATCH_STATES.stepFailed, {
      comment: 'Resolve batch or the summary failed (e.g. InvalidInput: no child was started)',
      errorPath: '$.error.Error',
      causePath: '$.error.Cause',
    });
    const onError: ErrorRoute = { next: stepFailed, resultPath: '$.error' };
    const mapFailed = new sfn.Fail(this, BATCH_STATES.mapFailed, {
      comment: 'More items failed than toleratedFailurePercentage allows; the report is written all the same',
      errorPath: '$.mapError.Error',
      causePath: '$.mapError.Cause',
    });
    const done = new sfn.Succeed(this, BATCH_STATES.succeeded, { outputPath: '$.summary' });

    const map = this.compactEachItem(props);
    map.addCatch(b.task(BATCH_STATES.summarizeFailed, onError).next(mapFailed), {
      errors: [sfn.Errors.ALL],
      resultPath: '$.mapError',
    });
    const definition = b
      .task(BATCH_STATES.resolve, onError)
      .next(map)
      .next(b.task(BATCH_STATES.summarize, onError))
      .next(done);

    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      stateMachineName: props.stateMachineName,
      stateMachineType: sfn.StateMachineType.STANDARD,
      definitionBody: sfn.DefinitionBody.fromChainable(definition),
      tracingEnabled: true,
      logs: { destination: props.logGroup, level: sfn.LogLevel.ALL, includeExecutionData: true },
    });
  }

  /** The Distributed Map: one child workflow execution (STANDARD) per item of `$.batch.items`. */
  private compactEachItem(props: BatchWorkflowProps): sfn.DistributedMap {
    const map = new sfn.DistributedMap(this, BATCH_STATES.map, {
      comment: 'One compaction per item; a failing item never stops the others (toleratedFailurePercentage)',
      itemsPath: '$.batch.items',
      maxConcurrencyPath: '$.batch.maxConcurrency',
      toleratedFailurePercentagePath: '$.batch.toleratedFailurePercentage',
      mapExecutionType: sfn.StateMachineType.STANDARD,
      resultWriterV2: new sfn.ResultWriterV2({ bucket: props.resultsBucket, prefix: BATCH_RESULTS_PREFIX }),
      resultPath: '$.map',
    });
    // CDK's validation wants executionType here, then renders ExecutionType from mapExecutionType (same value)
    // and warns that this one is ignored.
    map.itemProcessor(this.itemProcessor(props.compaction), {
      mode: sfn.ProcessorMode.DISTRIBUTED,
      executionType: sfn.ProcessorType.STANDARD,
    });
    Annotations.of(map).acknowledgeWarning(
      '@aws-cdk/aws-stepfunctions:propertyIgnored',
      'executionType is required by validation and equal to mapExecutionType (STANDARD), which is rendered',
    );
    return map;
  }

  /**
   * One item `{id, kind, childName, input, estimate}`: [dry run `estimate.name` → worth it?] → compaction
   * `childName`. No Catch: a failed child fails the iteration, which the Map counts and writes to FAILED_n.json.
   */
  private itemProcessor(compaction: sfn.IStateMachine): sfn.IChainable {
    // CDK's associateWithParent needs a literal input object; the child input is a whole object of the item,
    // so the link is merged into it (States.JsonMerge) from here: the iteration's own execution id.
    const startedBy = new sfn.Pass(this, BATCH_STATES.startedBy, {
      comment: 'The child executions link back to this iteration (the console shows "started by")',
      parameters: { AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID: sfn.JsonPath.executionId },
      resultPath: '$.startedBy',
    });
    const compact = this.startChild(
      BATCH_STATES.compact,
      compaction,
      '$.childName',
      '$.input',
      '$.compacted',
    );
    const estimate = this.startChild(
      BATCH_STATES.estimate,
      compaction,
      '$.estimate.name',
      '$.estimate.input',
      '$.estimated',
    );
    const itemDone = new sfn.Succeed(this, BATCH_STATES.itemDone);
    const notWorthIt = new sfn.Pass(this, BATCH_STATES.notWorthIt, {
      comment: 'The dry run predicts less than minSavingsPercent (or no saving at all): nothing is copied',
      result: sfn.Result.fromBoolean(true),
      resultPath: '$.skipped',
    }).next(itemDone);
    const savings = '$.estimated.Output.estimate.savingsPercent';
    const worthIt = new sfn.Choice(this, BATCH_STATES.worthIt)
      .when(
        sfn.Condition.and(
          sfn.Condition.isPresent(savings),
          sfn.Condition.isNumeric(savings),
          sfn.Condition.numberGreaterThanEqualsJsonPath(savings, '$.estimate.minSavingsPercent'),
        ),
        compact,
      )
      .otherwise(notWorthIt);
    compact.next(itemDone);
    estimate.next(worthIt);
    const estimateFirst = new sfn.Choice(this, BATCH_STATES.estimateFirst)
      .when(sfn.Condition.isPresent('$.estimate.name'), estimate)
      .otherwise(compact);
    return startedBy.next(estimateFirst);
  }

  /** startExecution.sync:2 of the compaction workflow named `namePath` with the input at `inputPath`. */
  private startChild(
    id: string,
    compaction: sfn.IStateMachine,
    namePath: string,
    inputPath: string,
    resultPath: string,
  ): tasks.StepFunctionsStartExecution {
    const task = new tasks.StepFunctionsStartExecution(this, id, {
      stateMachine: compaction,
      integrationPattern: sfn.IntegrationPattern.RUN_JOB,
      name: sfn.JsonPath.stringAt(namePath),
      input: sfn.TaskInput.fromJsonPathAt(
        sfn.JsonPath.jsonMerge(sfn.JsonPath.objectAt(inputPath), sfn.JsonPath.objectAt('$.startedBy')),
      ),
      resultSelector: CHILD_RESULT,
      resultPath,
    });
    retryStartExecution(task);
    return task;
  }
}
