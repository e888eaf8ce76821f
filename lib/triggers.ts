import { Duration } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';

export const SOURCE_SNAPSHOT_TAG = 'ebs-snapshot-compactor:source-snapshot';

export interface TriggersProps {
  readonly stateMachine: sfn.IStateMachine;
  readonly triggerTagKey: string;
  /** Runs once more with outcome failure when an execution ends without its own teardown. */
  readonly teardownFunction: lambda.IFunction;
}

/**
 * Tag trigger: adding the trigger tag to a snapshot starts an execution for it. Snapshots made by the
 * workflow carry the source-snapshot lineage tag and are ignored, so an output never triggers again.
 * Safety net: a timed-out or aborted execution never reaches its teardown states, so its end event
 * invokes the teardown function directly.
 */
export class Triggers extends Construct {
  public readonly tagRule: events.Rule;
  public readonly cleanupRule: events.Rule;
  public readonly deadLetterQueue: sqs.Queue;

  constructor(scope: Construct, id: string, props: TriggersProps) {
    super(scope, id);
    this.deadLetterQueue = new sqs.Queue(this, 'DeadLetters', {
      retentionPeriod: Duration.days(14),
      enforceSSL: true,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
    });
    this.tagRule = new events.Rule(this, 'TagRule', {
      description: `Start a compaction when a snapshot gets the tag "${props.triggerTagKey}"`,
      eventPattern: {
        source: ['aws.tag'],
        detailType: ['Tag Change on Resource'],
        detail: {
          service: ['ec2'],
          'resource-type': ['snapshot'],
          'changed-tag-keys': [props.triggerTagKey],
          tags: {
            [props.triggerTagKey]: [{ exists: true }],
            [SOURCE_SNAPSHOT_TAG]: [{ exists: false }],
          },
        },
      },
    });
    this.tagRule.addTarget(
      new targets.SfnStateMachine(props.stateMachine, {
        input: events.RuleTargetInput.fromObject({
          snapshotId: events.EventField.fromPath('$.resources[0]'),
        }),
        deadLetterQueue: this.deadLetterQueue,
        retryAttempts: 8,
        maxEventAge: Duration.hours(2),
      }),
    );

    this.cleanupRule = new events.Rule(this, 'CleanupRule', {
      description: 'Tear down what a timed-out or aborted compaction left behind',
      eventPattern: {
        source: ['aws.states'],
        detailType: ['Step Functions Execution Status Change'],
        detail: {
          stateMachineArn: [props.stateMachine.stateMachineArn],
          status: ['TIMED_OUT', 'ABORTED'],
        },
      },
    });
    this.cleanupRule.addTarget(
      new targets.LambdaFunction(props.teardownFunction, {
        event: events.RuleTargetInput.fromObject({
          executionName: events.EventField.fromPath('$.detail.name'),
          outcome: 'failure',
          keep: { snapshotIds: [], imageId: null },
        }),
        deadLetterQueue: this.deadLetterQueue,
        retryAttempts: 8,
        maxEventAge: Duration.hours(2),
      }),
    );
  }
}
