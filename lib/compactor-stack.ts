import { ArnFormat, CfnOutput, RemovalPolicy, Stack, StackProps, Tags } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { CleanupWorkflow } from './cleanup-workflow';
import { CompactVolumesDocument } from './command-document';
import { acknowledgeNagFindings } from './nag-acknowledgements';
import { transferNetwork } from './network';
import { Settings } from './settings';
import { TaskFunctions } from './task-functions';
import { TaskRole } from './task-role';
import { SourceBlocksBucket } from './source-blocks-bucket';
import { ROOT_DEVICE_NAME, ROOT_VOLUME_GIB, TransferInstance } from './transfer-instance';
import { Triggers } from './triggers';
import { CompactionWorkflow } from './workflow';

export interface CompactorStackProps extends StackProps {
  readonly settings: Settings;
}

export class CompactorStack extends Stack {
  public readonly workflow: CompactionWorkflow;
  public readonly cleanup: CleanupWorkflow;

  constructor(scope: Construct, id: string, props: CompactorStackProps) {
    super(scope, id, { ...props, stackName: props.settings.stackName });
    const settings = props.settings;
    Tags.of(this).add('ebs-snapshot-compactor:managed-by', settings.stackName);
    const retention = settings.logRetentionDays as logs.RetentionDays;

    const network = transferNetwork(this, settings);
    const commandLogGroup = new logs.LogGroup(this, 'CommandLogs', {
      retention,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const transfer = new TransferInstance(this, 'TransferInstance', {
      vpc: network.vpc,
      architecture: settings.architecture,
      commandLogGroup,
    });
    const document = new CompactVolumesDocument(this, 'CompactVolumesDocument');
    const sourceBlocks = new SourceBlocksBucket(this, 'SourceBlocksBucket', {
      stateMachineTimeoutMinutes: settings.stateMachineTimeoutMinutes,
    });

    const taskRole = new TaskRole(this, 'TaskRole', {
      stackName: settings.stackName,
      subnetIds: network.subnetIds,
      securityGroupId: transfer.securityGroup.securityGroupId,
      launchTemplateId: transfer.launchTemplate.launchTemplateId!,
      amiParameterName: transfer.amiParameterName,
      instanceRole: transfer.role,
      documentName: document.documentName,
      commandLogGroupArn: commandLogGroup.logGroupArn,
      kmsKeyArns: settings.kmsKeyArns ?? [
        this.formatArn({ service: 'kms', resource: 'key', resourceName: '*' }),
      ],
      sourceBlocksBucket: sourceBlocks.bucket,
    });
    const tasks = new TaskFunctions(this, 'Tasks', {
      role: taskRole.role,
      logRetention: retention,
      powertoolsLayerArn: settings.powertoolsLayerArn,
      environment: {
        STACK_NAME: settings.stackName,
        SUBNET_IDS: network.subnetIds.join(','),
        LAUNCH_TEMPLATE_ID: transfer.launchTemplate.launchTemplateId!,
        // Empty = prepare picks the types by the bytes to copy and ARCHITECTURE.
        INSTANCE_TYPES: settings.instanceTypes?.join(',') ?? '',
        ARCHITECTURE: settings.architecture,
        ALLOW_ON_DEMAND: String(settings.allowOnDemand),
        SOURCE_VOLUME_IOPS: String(settings.sourceVolumeIops),
        SOURCE_VOLUME_THROUGHPUT: String(settings.sourceVolumeThroughput),
        VOLUME_INITIALIZATION_RATE: String(settings.volumeInitializationRate),
        MAX_VOLUME_GIB: String(settings.maxVolumeGiB),
        DOCUMENT_NAME: document.documentName,
        COMMAND_LOG_GROUP: commandLogGroup.logGroupName,
        EVENT_BUS_NAME: 'default',
        TRIGGER_TAG_KEY: settings.triggerTagKey,
        MAX_LAUNCH_ATTEMPTS: String(settings.maxLaunchAttempts),
        ROOT_DEVICE_NAME,
        ROOT_VOLUME_GIB: String(ROOT_VOLUME_GIB),
        STATE_MACHINE_TIMEOUT_MINUTES: String(settings.stateMachineTimeoutMinutes),
        // The shortest compaction poll interval the plan may choose.
        COMPACTION_POLL_SECONDS: String(settings.compactionPoll.intervalSeconds),
        SOURCE_BLOCKS_BUCKET: sourceBlocks.bucket.bucketName,
      },
    });
    taskRole.allowLogging(tasks.logGroupArns);

    const workflowLogGroup = new logs.LogGroup(this, 'WorkflowLogs', {
      retention,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.workflow = new CompactionWorkflow(this, 'Workflow', {
      settings,
      functions: tasks.functions,
      logGroup: workflowLogGroup,
    });
    const stateMachine = this.workflow.stateMachine;
    this.cleanup = new CleanupWorkflow(this, 'Cleanup', {
      settings,
      teardownFunction: tasks.functions.teardown,
      logGroup: new logs.LogGroup(this, 'CleanupLogs', { retention, removalPolicy: RemovalPolicy.DESTROY }),
    });

    // After the state machine: start_from_tag's environment names it (the definition never names start_from_tag).
    const triggers = new Triggers(this, 'Triggers', {
      stateMachine,
      cleanupStateMachine: this.cleanup.stateMachine,
      triggerTagKey: settings.triggerTagKey,
      taskFunctionShared: tasks.shared,
    });

    const arnParameter = new ssm.StringParameter(this, 'StateMachineArnParameter', {
      parameterName: `/ebs-snapshot-compactor/${settings.stackName}/state-machine-arn`,
      stringValue: stateMachine.stateMachineArn,
      description: 'ARN of the ebs-snapshot-compactor state machine, for pipelines that start compactions',
    });
    const executions = this.formatArn({
      service: 'states',
      resource: 'execution',
      resourceName: `${stateMachine.stateMachineName}:*`,
      arnFormat: ArnFormat.COLON_RESOURCE_NAME,
    });
    const pipelinePolicy = new iam.ManagedPolicy(this, 'StartCompactionsPolicy', {
      description: `Lets a pipeline start, watch and stop compactions of ${settings.stackName}`,
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
          sid: 'FindTheStateMachine',
          actions: ['ssm:GetParameter'],
          resources: [arnParameter.parameterArn],
        }),
      ],
    });

    new CfnOutput(this, 'StateMachineArn', {
      value: stateMachine.stateMachineArn,
      exportName: `${settings.stackName}-StateMachineArn`,
      description: 'Start compactions here (StartExecution)',
    });
    new CfnOutput(this, 'StateMachineArnParameterName', { value: arnParameter.parameterName });
    new CfnOutput(this, 'StartCompactionsPolicyArn', { value: pipelinePolicy.managedPolicyArn });
    new CfnOutput(this, 'CommandLogGroupName', { value: commandLogGroup.logGroupName });
    new CfnOutput(this, 'TagTriggerDeadLetterQueueUrl', { value: triggers.deadLetterQueue.queueUrl });

    acknowledgeNagFindings({
      taskRole: taskRole.role,
      taskFunctions: Object.values(tasks.functions),
      startFromTag: triggers.startFromTag,
      startFromTagRole: triggers.startFromTagRole,
      instanceRole: transfer.role,
      stateMachine,
      cleanupStateMachine: this.cleanup.stateMachine,
      pipelinePolicy,
      deadLetterQueue: triggers.deadLetterQueue,
      createdVpc: network.createdVpc,
      sourceBlocksBucket: sourceBlocks.bucket,
    });
  }
}
