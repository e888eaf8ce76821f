import { ArnFormat, CfnOutput, RemovalPolicy, Stack, StackProps, Tags } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { BatchWorkflow, batchStateMachineName } from './batch-workflow';
import { CleanupWorkflow } from './cleanup-workflow';
import { suppressCheckovFindings } from './checkov-suppressions';
import { CompactVolumesDocument } from './command-document';
import { acknowledgeNagFindings } from './nag-acknowledgements';
import { transferNetwork } from './network';
import { Operations } from './operations';
import { Settings } from './settings';
import { CONTRACT_TASKS, checkedEnvironment, TaskFunctions } from './task-functions';
import { TaskRoles } from './task-role';
import { BATCH_RESULTS_PREFIX, BatchResultsBucket, SourceBlocksBucket } from './source-blocks-bucket';
import { ROOT_DEVICE_NAME, ROOT_VOLUME_GIB, TransferInstance } from './transfer-instance';
import { Triggers } from './triggers';
import { CompactionWorkflow } from './workflow';

export interface CompactorStackProps extends StackProps {
  readonly settings: Settings;
}

/** What the workflow's environment names besides the settings. */
export interface WorkflowEnvironmentParts {
  readonly subnetIds: string[];
  readonly launchTemplateId: string;
  readonly documentName: string;
  readonly commandLogGroupName: string;
  readonly sourceBlocksBucketName: string;
  readonly batchResultsBucketName: string;
  /** The data-plane program's file asset (lib/command-document.ts). */
  readonly programBucketName: string;
  readonly programKey: string;
}

/** Every workflow task function's key and value (contract/environment.json); each function gets its own keys. */
export function workflowEnvironment(
  settings: Settings,
  parts: WorkflowEnvironmentParts,
): Record<string, string> {
  return checkedEnvironment('workflow', {
    STACK_NAME: settings.stackName,
    SUBNET_IDS: parts.subnetIds.join(','),
    LAUNCH_TEMPLATE_ID: parts.launchTemplateId,
    // Empty = prepare picks the types by the bytes to copy and ARCHITECTURE.
    INSTANCE_TYPES: settings.instanceTypes?.join(',') ?? '',
    ARCHITECTURE: settings.architecture,
    ALLOW_ON_DEMAND: String(settings.allowOnDemand),
    SOURCE_VOLUME_IOPS: String(settings.sourceVolumeIops),
    SOURCE_VOLUME_THROUGHPUT: String(settings.sourceVolumeThroughput),
    VOLUME_INITIALIZATION_RATE: String(settings.volumeInitializationRate),
    MAX_VOLUME_GIB: String(settings.maxVolumeGiB),
    DOCUMENT_NAME: parts.documentName,
    COMMAND_LOG_GROUP: parts.commandLogGroupName,
    EVENT_BUS_NAME: 'default',
    TRIGGER_TAG_KEY: settings.triggerTagKey,
    ROOT_DEVICE_NAME,
    ROOT_VOLUME_GIB: String(ROOT_VOLUME_GIB),
    STATE_MACHINE_TIMEOUT_MINUTES: String(settings.stateMachineTimeoutMinutes),
    // The shortest compaction poll interval the plan may choose.
    COMPACTION_POLL_SECONDS: String(settings.compactionPoll.intervalSeconds),
    SOURCE_BLOCKS_BUCKET: parts.sourceBlocksBucketName,
    BATCH_RESULTS_BUCKET: parts.batchResultsBucketName,
    PROGRAM_BUCKET: parts.programBucketName,
    PROGRAM_KEY: parts.programKey,
  });
}

/** The transfer instance's side: network, instance, Command document, its log group and the block-list bucket. */
interface DataPlane {
  readonly network: ReturnType<typeof transferNetwork>;
  readonly transfer: TransferInstance;
  readonly document: CompactVolumesDocument;
  readonly commandLogGroup: logs.LogGroup;
  readonly sourceBlocks: SourceBlocksBucket;
  /** The batch results (not a data-plane bucket, but made here with the other bucket for the task role). */
  readonly batchResults: BatchResultsBucket;
}

export class CompactorStack extends Stack {
  public readonly workflow: CompactionWorkflow;
  public readonly cleanup: CleanupWorkflow;
  public readonly batch: BatchWorkflow;
  private readonly settings: Settings;
  private readonly retention: logs.RetentionDays;

  constructor(scope: Construct, id: string, props: CompactorStackProps) {
    super(scope, id, { ...props, stackName: props.settings.stackName });
    this.settings = props.settings;
    this.retention = this.settings.logRetentionDays as logs.RetentionDays;
    Tags.of(this).add('ebs-snapshot-compactor:managed-by', this.settings.stackName);

    const dataPlane = this.dataPlane();
    const taskRoles = this.taskRoles(dataPlane);
    const tasks = this.taskFunctions(dataPlane, taskRoles);

    this.workflow = new CompactionWorkflow(this, 'Workflow', {
      settings: this.settings,
      functions: tasks.functions,
      logGroup: this.logGroup('WorkflowLogs'),
    });
    this.cleanup = new CleanupWorkflow(this, 'Cleanup', {
      settings: this.settings,
      teardownFunction: tasks.functions.teardown,
      logGroup: this.logGroup('CleanupLogs'),
    });
    this.batch = this.batchWorkflow(tasks, dataPlane);
    // After the state machine: start_from_tag's environment names it (the definition never names start_from_tag).
    const triggers = new Triggers(this, 'Triggers', {
      stateMachine: this.workflow.stateMachine,
      cleanupStateMachine: this.cleanup.stateMachine,
      triggerTagKey: this.settings.triggerTagKey,
      taskFunctionShared: tasks.shared,
      imageBuilder: this.settings,
    });
    const pipelinePolicy = this.pipelineAccess(dataPlane, triggers);
    const operations = this.operations(tasks, dataPlane, triggers);

    acknowledgeNagFindings({
      taskRoles: Object.values(taskRoles.roles),
      taskFunctions: Object.values(tasks.functions),
      startFromTag: triggers.startFromTag,
      startFromTagRole: triggers.startFromTagRole,
      instanceRole: dataPlane.transfer.role,
      stateMachine: this.workflow.stateMachine,
      attemptStateMachine: this.workflow.attempt.stateMachine,
      cleanupStateMachine: this.cleanup.stateMachine,
      pipelinePolicy,
      deadLetterQueue: triggers.deadLetterQueue,
      createdVpc: dataPlane.network.createdVpc,
      sourceBlocksBucket: dataPlane.sourceBlocks.bucket,
      batchStateMachine: this.batch.stateMachine,
      batchResultsBucket: dataPlane.batchResults.bucket,
      operations,
    });
    suppressCheckovFindings(this);
  }

  /** Dashboard, alarms on an SNS topic, the scheduled sweeper (docs/operations.md). */
  private operations(tasks: TaskFunctions, dataPlane: DataPlane, triggers: Triggers): Operations {
    return new Operations(this, 'Operations', {
      settings: this.settings,
      stateMachine: this.workflow.stateMachine,
      cleanupStateMachine: this.cleanup.stateMachine,
      batchStateMachine: this.batch.stateMachine,
      taskFunctionShared: tasks.shared,
      sourceBlocksBucket: dataPlane.sourceBlocks.bucket,
      triggers: {
        functions: {
          TagTrigger: triggers.startFromTag,
          ...(triggers.imageBuilderTrigger ? { ImageBuilderTrigger: triggers.imageBuilderTrigger.fn } : {}),
        },
        deadLetterQueue: triggers.deadLetterQueue,
      },
    });
  }

  /** Every workflow task function, with its own role; each may write only to its own logs. */
  private taskFunctions(dataPlane: DataPlane, taskRoles: TaskRoles): TaskFunctions {
    const tasks = new TaskFunctions(this, 'Tasks', {
      roles: taskRoles.roles,
      logRetention: this.retention,
      powertoolsLayerArn: this.settings.powertoolsLayerArn,
      environment: workflowEnvironment(this.settings, {
        subnetIds: dataPlane.network.subnetIds,
        launchTemplateId: dataPlane.transfer.launchTemplate.launchTemplateId!,
        documentName: dataPlane.document.documentName,
        commandLogGroupName: dataPlane.commandLogGroup.logGroupName,
        sourceBlocksBucketName: dataPlane.sourceBlocks.bucket.bucketName,
        batchResultsBucketName: dataPlane.batchResults.bucket.bucketName,
        programBucketName: dataPlane.document.program.s3BucketName,
        programKey: dataPlane.document.program.s3ObjectKey,
      }),
    });
    for (const [module, fn] of Object.entries(tasks.functions)) {
      taskRoles.allowLogging(module, fn.logGroup.logGroupArn);
    }
    return tasks;
  }

  /** The batch state machine: one child execution of the workflow per item (docs/batch.md). */
  private batchWorkflow(tasks: TaskFunctions, dataPlane: DataPlane): BatchWorkflow {
    return new BatchWorkflow(this, 'Batch', {
      stateMachineName: batchStateMachineName(this.settings.stackName),
      compaction: this.workflow.stateMachine,
      functions: tasks.functions,
      resultsBucket: dataPlane.batchResults.bucket,
      logGroup: this.logGroup('BatchLogs'),
    });
  }

  private logGroup(id: string): logs.LogGroup {
    return new logs.LogGroup(this, id, { retention: this.retention, removalPolicy: RemovalPolicy.DESTROY });
  }

  private dataPlane(): DataPlane {
    const network = transferNetwork(this, this.settings);
    const commandLogGroup = this.logGroup('CommandLogs');
    const transfer = new TransferInstance(this, 'TransferInstance', {
      vpc: network.vpc,
      architecture: this.settings.architecture,
      commandLogGroup,
      stackName: this.settings.stackName,
      kmsKeyArns: this.kmsKeyArns(),
    });
    const document = new CompactVolumesDocument(this, 'CompactVolumesDocument');
    const sourceBlocks = new SourceBlocksBucket(this, 'SourceBlocksBucket', {
      stateMachineTimeoutMinutes: this.settings.stateMachineTimeoutMinutes,
    });
    const batchResults = new BatchResultsBucket(this, 'BatchResultsBucket', {
      retentionDays: this.settings.batchResultRetentionDays,
    });
    return { network, transfer, document, commandLogGroup, sourceBlocks, batchResults };
  }

  /** The kmsKeyArns setting, or every key of this account and Region. */
  private kmsKeyArns(): string[] {
    return (
      this.settings.kmsKeyArns ?? [this.formatArn({ service: 'kms', resource: 'key', resourceName: '*' })]
    );
  }

  private taskRoles(d: DataPlane): TaskRoles {
    return new TaskRoles(this, 'TaskRoles', {
      tasks: CONTRACT_TASKS.filter((task) => task.workflow).map((task) => ({
        module: task.module,
        grants: task.grants ?? [],
        describes: task.describes ?? [],
      })),
      stackName: this.settings.stackName,
      subnetIds: d.network.subnetIds,
      securityGroupId: d.transfer.securityGroup.securityGroupId,
      launchTemplateId: d.transfer.launchTemplate.launchTemplateId!,
      amiParameterName: d.transfer.amiParameterName,
      instanceRole: d.transfer.role,
      documentName: d.document.documentName,
      programObjectArn: d.document.programObjectArn,
      commandLogGroupArn: d.commandLogGroup.logGroupArn,
      kmsKeyArns: this.kmsKeyArns(),
      sourceBlocksBucket: d.sourceBlocks.bucket,
      batchResultsBucket: d.batchResults.bucket,
      batchStateMachineName: batchStateMachineName(this.settings.stackName),
    });
  }

  /** What a pipeline needs to start, watch and stop compactions and batches, and the stack's outputs. */
  private pipelineAccess(d: DataPlane, triggers: Triggers): iam.ManagedPolicy {
    const stateMachine = this.workflow.stateMachine;
    const arnParameter = new ssm.StringParameter(this, 'StateMachineArnParameter', {
      parameterName: `/ebs-snapshot-compactor/${this.settings.stackName}/state-machine-arn`,
      stringValue: stateMachine.stateMachineArn,
      description: 'ARN of the ebs-snapshot-compactor state machine, for pipelines that start compactions',
    });
    const batchArnParameter = new ssm.StringParameter(this, 'BatchStateMachineArnParameter', {
      parameterName: `/ebs-snapshot-compactor/${this.settings.stackName}/batch-state-machine-arn`,
      stringValue: this.batch.stateMachine.stateMachineArn,
      description: 'ARN of the ebs-snapshot-compactor batch state machine, for pipelines that start batches',
    });
    const pipelinePolicy = this.pipelinePolicy([arnParameter, batchArnParameter], d.batchResults.bucket);
    this.batchOutputs(batchArnParameter, d.batchResults.bucket);
    new CfnOutput(this, 'StateMachineArn', {
      value: stateMachine.stateMachineArn,
      exportName: `${this.settings.stackName}-StateMachineArn`,
      description: 'Start compactions here (StartExecution)',
    });
    new CfnOutput(this, 'StateMachineArnParameterName', { value: arnParameter.parameterName });
    new CfnOutput(this, 'StartCompactionsPolicyArn', { value: pipelinePolicy.managedPolicyArn });
    new CfnOutput(this, 'CommandLogGroupName', { value: d.commandLogGroup.logGroupName });
    new CfnOutput(this, 'TagTriggerDeadLetterQueueUrl', { value: triggers.deadLetterQueue.queueUrl });
    return pipelinePolicy;
  }

  private batchOutputs(batchArnParameter: ssm.StringParameter, resultsBucket: s3.IBucket): void {
    new CfnOutput(this, 'BatchStateMachineArn', {
      value: this.batch.stateMachine.stateMachineArn,
      exportName: `${this.settings.stackName}-BatchStateMachineArn`,
      description: 'Start batches here (StartExecution with a batch input, docs/batch.md)',
    });
    new CfnOutput(this, 'BatchStateMachineArnParameterName', { value: batchArnParameter.parameterName });
    new CfnOutput(this, 'BatchResultsBucketName', {
      value: resultsBucket.bucketName,
      description: 'Batch reports: batches/<batch execution name>/batch-report.json',
    });
  }

  /** Every execution of a state machine (their ARNs are `...:execution:<state machine name>:<execution name>`). */
  private executionsOf(stateMachine: sfn.StateMachine): string {
    return this.formatArn({
      service: 'states',
      resource: 'execution',
      resourceName: `${stateMachine.stateMachineName}:*`,
      arnFormat: ArnFormat.COLON_RESOURCE_NAME,
    });
  }

  private pipelinePolicy(arnParameters: ssm.StringParameter[], resultsBucket: s3.IBucket): iam.ManagedPolicy {
    const stateMachine = this.workflow.stateMachine;
    const executions = this.executionsOf(stateMachine);
    const batchStateMachine = this.batch.stateMachine;
    return new iam.ManagedPolicy(this, 'StartCompactionsPolicy', {
      description: `Lets a pipeline start, watch and stop compactions and batches of ${this.settings.stackName}`,
      statements: [
        new iam.PolicyStatement({
          sid: 'StartCompactions',
          actions: ['states:StartExecution'],
          resources: [stateMachine.stateMachineArn],
        }),
        new iam.PolicyStatement({
          sid: 'WatchAndStopCompactions',
          actions: ['states:DescribeExecution', 'states:StopExecution', 'states:GetExecutionHistory'],
          resources: [executions],
        }),
        new iam.PolicyStatement({
          sid: 'FollowLaunchAttempts',
          // each launch attempt is a child execution with its own history: the client's --wait and status read
          // its phases and copy progress there (the workflow's history names it in Run attempt's TaskSubmitted)
          actions: ['states:DescribeExecution', 'states:GetExecutionHistory'],
          resources: [this.executionsOf(this.workflow.attempt.stateMachine)],
        }),
        new iam.PolicyStatement({
          sid: 'StartBatches',
          actions: ['states:StartExecution'],
          resources: [batchStateMachine.stateMachineArn],
        }),
        new iam.PolicyStatement({
          sid: 'WatchAndStopBatches',
          actions: ['states:DescribeExecution', 'states:StopExecution', 'states:GetExecutionHistory'],
          resources: [this.executionsOf(batchStateMachine)],
        }),
        new iam.PolicyStatement({
          sid: 'CountABatchsItems',
          // the Map Run of a batch (its ARN is in the execution history's MapRunStarted event): item counts
          actions: ['states:DescribeMapRun'],
          resources: [
            this.formatArn({
              service: 'states',
              resource: 'mapRun',
              resourceName: `${batchStateMachineName(this.settings.stackName)}/*`,
              arnFormat: ArnFormat.COLON_RESOURCE_NAME,
            }),
          ],
        }),
        new iam.PolicyStatement({
          sid: 'ReadBatchResults',
          actions: ['s3:GetObject'],
          resources: [resultsBucket.arnForObjects(`${BATCH_RESULTS_PREFIX}/*`)],
        }),
        new iam.PolicyStatement({
          sid: 'FindTheStateMachines',
          actions: ['ssm:GetParameter'],
          resources: arnParameters.map((parameter) => parameter.parameterArn),
        }),
      ],
    });
  }
}
