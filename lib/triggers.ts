import { ArnFormat, Duration, Stack } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import {
  checkedEnvironment,
  createTaskFunction,
  POWERTOOLS_ENVIRONMENT,
  TaskFunctionShared,
} from './task-functions';
import { ImageBuilderTrigger } from './image-builder-trigger';
import { keepFailedInvocations, TargetDelivery } from './trigger-failures';
import { Settings } from './settings';

export const SOURCE_SNAPSHOT_TAG = 'ebs-snapshot-compactor:source-snapshot';

/** Main executions that end here never ran their own teardown (or not to its end). */
export const CLEANUP_STATUSES = ['FAILED', 'TIMED_OUT', 'ABORTED'];

export interface TriggersProps {
  readonly stateMachine: sfn.StateMachine;
  /** Started for every main execution that ends FAILED, TIMED_OUT or ABORTED. */
  readonly cleanupStateMachine: sfn.IStateMachine;
  readonly triggerTagKey: string;
  /** The task functions' shared code and layer; start_from_tag gets its own role and environment. */
  readonly taskFunctionShared: TaskFunctionShared;
  /** The Image Builder settings; no pipeline ARN (or absent) = no Image Builder trigger. */
  readonly imageBuilder?: Pick<Settings, 'imageBuilderPipelineArns' | 'imageBuilderCopySharing'>;
}

/**
 * Tag trigger: adding the trigger tag to a snapshot invokes start_from_tag, which starts an execution named
 * after the snapshot and the tag value, so a duplicate event is a no-op. Snapshots made by the workflow
 * carry the source-snapshot lineage tag and are ignored, so an output never triggers again.
 * Safety net: a failed, timed-out or aborted execution may not have run its teardown to the end, so its end
 * event starts the cleanup state machine.
 */
export class Triggers extends Construct {
  public readonly tagRule: events.Rule;
  public readonly cleanupRule: events.Rule;
  public readonly deadLetterQueue: sqs.Queue;
  public readonly startFromTag: lambda.Function;
  public readonly startFromTagRole: iam.Role;
  /** Only with the imageBuilderPipelineArns setting (lib/image-builder-trigger.ts). */
  public readonly imageBuilderTrigger?: ImageBuilderTrigger;

  constructor(scope: Construct, id: string, props: TriggersProps) {
    super(scope, id);
    this.deadLetterQueue = new sqs.Queue(this, 'DeadLetters', {
      retentionPeriod: Duration.days(14),
      enforceSSL: true,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
    });
    const targetDelivery: TargetDelivery = {
      deadLetterQueue: this.deadLetterQueue,
      retryAttempts: 8,
      maxEventAge: Duration.hours(2),
    };
    this.startFromTagRole = new iam.Role(this, 'StartFromTagRole', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `ebs-snapshot-compactor tag trigger: starts executions of ${Stack.of(this).stackName}`,
    });
    this.startFromTag = this.createStartFromTag(props);
    keepFailedInvocations(this.startFromTag, this.deadLetterQueue);
    this.grantStartFromTag(props.stateMachine);
    this.tagRule = this.createTagRule(props.triggerTagKey, targetDelivery);
    this.cleanupRule = this.createCleanupRule(props, targetDelivery);
    const pipelineArns = props.imageBuilder?.imageBuilderPipelineArns ?? [];
    if (pipelineArns.length > 0) {
      this.imageBuilderTrigger = new ImageBuilderTrigger(this, 'ImageBuilder', {
        stateMachine: props.stateMachine,
        pipelineArns,
        copySharing: props.imageBuilder?.imageBuilderCopySharing ?? true,
        taskFunctionShared: props.taskFunctionShared,
        delivery: targetDelivery,
      });
    }
  }

  private createStartFromTag(props: TriggersProps): lambda.Function {
    return createTaskFunction(this, 'start_from_tag', {
      ...props.taskFunctionShared,
      role: this.startFromTagRole,
      // Only what it reads (compactor/trigger.py TriggerConfig); none of the workflow's settings.
      environment: {
        ...POWERTOOLS_ENVIRONMENT,
        ...checkedEnvironment('start_from_tag', {
          TRIGGER_TAG_KEY: props.triggerTagKey,
          STATE_MACHINE_ARN: props.stateMachine.stateMachineArn,
        }),
      },
    });
  }

  /** Start executions, find an existing one by name, write its own logs. */
  private grantStartFromTag(stateMachine: sfn.StateMachine): void {
    this.startFromTagRole.addToPolicy(
      new iam.PolicyStatement({
        sid: 'StartCompactions',
        actions: ['states:StartExecution'],
        resources: [stateMachine.stateMachineArn],
      }),
    );
    this.startFromTagRole.addToPolicy(
      new iam.PolicyStatement({
        sid: 'FindExistingExecution',
        actions: ['states:DescribeExecution'],
        resources: [
          Stack.of(this).formatArn({
            service: 'states',
            resource: 'execution',
            resourceName: `${stateMachine.stateMachineName}:*`,
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        ],
      }),
    );
    this.startFromTagRole.addToPolicy(
      new iam.PolicyStatement({
        sid: 'WriteOwnLogs',
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [this.startFromTag.logGroup.logGroupArn],
      }),
    );
  }

  private createTagRule(triggerTagKey: string, targetDelivery: TargetDelivery): events.Rule {
    const rule = new events.Rule(this, 'TagRule', {
      description: `Start a compaction when a snapshot gets the tag "${triggerTagKey}"`,
      eventPattern: {
        source: ['aws.tag'],
        detailType: ['Tag Change on Resource'],
        detail: {
          service: ['ec2'],
          'resource-type': ['snapshot'],
          'changed-tag-keys': [triggerTagKey],
          tags: {
            [triggerTagKey]: [{ exists: true }],
            [SOURCE_SNAPSHOT_TAG]: [{ exists: false }],
          },
        },
      },
    });
    // The whole event: start_from_tag needs the tag value for the execution name.
    rule.addTarget(new targets.LambdaFunction(this.startFromTag, targetDelivery));
    return rule;
  }

  private createCleanupRule(props: TriggersProps, targetDelivery: TargetDelivery): events.Rule {
    const rule = new events.Rule(this, 'CleanupRule', {
      description: 'Clean up after a compaction that failed, timed out or was aborted',
      eventPattern: {
        source: ['aws.states'],
        detailType: ['Step Functions Execution Status Change'],
        detail: {
          stateMachineArn: [props.stateMachine.stateMachineArn],
          status: CLEANUP_STATUSES,
        },
      },
    });
    rule.addTarget(
      new targets.SfnStateMachine(props.cleanupStateMachine, {
        input: events.RuleTargetInput.fromObject({
          executionName: events.EventField.fromPath('$.detail.name'),
          executionArn: events.EventField.fromPath('$.detail.executionArn'),
          status: events.EventField.fromPath('$.detail.status'),
        }),
        ...targetDelivery,
      }),
    );
    return rule;
  }
}
