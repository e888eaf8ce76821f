import { ArnFormat, CfnElement, CfnRule, Fn, Stack, Token, Validations } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct, IConstruct } from 'constructs';
import {
  checkedEnvironment,
  createTaskFunction,
  POWERTOOLS_ENVIRONMENT,
  TaskFunctionShared,
} from './task-functions';
import { keepFailedInvocations, TargetDelivery } from './trigger-failures';

/** What EC2 Image Builder sends when an image changes state (EventBridge reference, "EC2 Image Builder events"). */
export const IMAGE_BUILDER_SOURCE = 'aws.imagebuilder';
export const IMAGE_STATE_CHANGE = 'EC2 Image Builder Image State Change';

const NAG = 'AwsSolutions::AwsSolutions-';

/**
 * The statuses an image passes through while it is built (Image Builder's ImageStatus): AVAILABLE after one of
 * them is a new image; AVAILABLE after DEPRECATED or DISABLED is an old one set back, not to be compacted again.
 */
export const IMAGE_BUILD_STATES = [
  'PENDING',
  'CREATING',
  'BUILDING',
  'TESTING',
  'DISTRIBUTING',
  'INTEGRATING',
];

export interface ImageBuilderTriggerProps {
  readonly stateMachine: sfn.StateMachine;
  /** The imageBuilderPipelineArns setting: at least one (the stack makes no trigger without). */
  readonly pipelineArns: string[];
  /** The imageBuilderCopySharing setting: the copySharing of the executions started. */
  readonly copySharing: boolean;
  readonly taskFunctionShared: TaskFunctionShared;
  /** The tag rule's delivery: retries, maximum event age and the dead-letter queue (also the function's on-failure destination). */
  readonly delivery: TargetDelivery;
}

/**
 * Image Builder trigger: an image that becomes AVAILABLE invokes start_from_image_builder, which reads it with
 * GetImage, keeps only images of the listed pipelines (the event names the image, not the pipeline) and starts
 * one execution per AMI of this Region and account, named after the AMI, so a repeated event starts nothing.
 */
export class ImageBuilderTrigger extends Construct {
  public readonly rule: events.Rule;
  public readonly fn: lambda.Function;
  public readonly role: iam.Role;

  constructor(scope: Construct, id: string, props: ImageBuilderTriggerProps) {
    super(scope, id);
    if (props.pipelineArns.length === 0) {
      throw new Error('ImageBuilderTrigger needs at least one pipeline ARN (imageBuilderPipelineArns)');
    }
    this.refuseOtherRegionsAndAccounts(props.pipelineArns);
    this.role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `ebs-snapshot-compactor Image Builder trigger: starts executions of ${Stack.of(this).stackName}`,
    });
    this.fn = createTaskFunction(this, 'start_from_image_builder', {
      ...props.taskFunctionShared,
      role: this.role,
      environment: {
        ...POWERTOOLS_ENVIRONMENT,
        ...checkedEnvironment('start_from_image_builder', {
          STATE_MACHINE_ARN: props.stateMachine.stateMachineArn,
          IMAGE_BUILDER_PIPELINE_ARNS: props.pipelineArns.join(','),
          IMAGE_BUILDER_COPY_SHARING: String(props.copySharing),
        }),
      },
    });
    keepFailedInvocations(this.fn, props.delivery.deadLetterQueue);
    this.grant(props.stateMachine);
    this.rule = new events.Rule(this, 'Rule', {
      description: 'Compact the AMIs of an EC2 Image Builder image that became AVAILABLE',
      eventPattern: {
        source: [IMAGE_BUILDER_SOURCE],
        detailType: [IMAGE_STATE_CHANGE],
        detail: { state: { status: ['AVAILABLE'] }, 'previous-state': { status: IMAGE_BUILD_STATES } },
      },
    });
    this.rule.addTarget(new targets.LambdaFunction(this.fn, props.delivery));
    this.acknowledge(props.stateMachine);
  }

  /**
   * A pipeline of another Region or account never sends its events to this stack's default bus, and GetImage is
   * granted only here: refused at synth when the stack's environment is known, else by a CloudFormation rule at
   * deploy (an env-agnostic stack learns its Region and account only then).
   */
  private refuseOtherRegionsAndAccounts(pipelineArns: string[]): void {
    const stack = Stack.of(this);
    const parts = pipelineArns.map((arn) => ({ arn, region: arn.split(':')[3], account: arn.split(':')[4] }));
    for (const { arn, region, account } of parts) {
      for (const [what, own, theirs] of [
        ['Region', stack.region, region],
        ['account', stack.account, account],
      ]) {
        if (!Token.isUnresolved(own) && own !== theirs) {
          throw new Error(
            `imageBuilderPipelineArns: ${arn} is in ${what} ${theirs}, not this stack's ${own}: its events never ` +
              `reach this stack; deploy the stack in that ${what} (docs/deploy.md, "Image Builder trigger")`,
          );
        }
      }
    }
    new CfnRule(this, 'PipelinesInThisRegionAndAccount', {
      assertions: parts.flatMap(({ arn, region, account }) => [
        {
          assert: Fn.conditionEquals(region, stack.region),
          assertDescription: `imageBuilderPipelineArns: ${arn} is not in this stack's Region: deploy the stack there`,
        },
        {
          assert: Fn.conditionEquals(account, stack.account),
          assertDescription: `imageBuilderPipelineArns: ${arn} is not in this stack's account: deploy the stack there`,
        },
      ]),
    });
  }

  /** Read the image, start and find executions, write its own logs. */
  private grant(stateMachine: sfn.StateMachine): void {
    const stack = Stack.of(this);
    const statements = [
      new iam.PolicyStatement({
        sid: 'ReadImageBuilderImages',
        actions: ['imagebuilder:GetImage'],
        // Image build versions are named after the recipe, not the pipeline, so the pipeline is checked in code.
        resources: [stack.formatArn({ service: 'imagebuilder', resource: 'image', resourceName: '*/*/*' })],
      }),
      new iam.PolicyStatement({
        sid: 'StartCompactions',
        actions: ['states:StartExecution'],
        resources: [stateMachine.stateMachineArn],
      }),
      new iam.PolicyStatement({
        sid: 'FindExistingExecution',
        actions: ['states:DescribeExecution'],
        resources: [
          stack.formatArn({
            service: 'states',
            resource: 'execution',
            resourceName: `${stateMachine.stateMachineName}:*`,
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        ],
      }),
      new iam.PolicyStatement({
        sid: 'WriteOwnLogs',
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [this.fn.logGroup.logGroupArn],
      }),
    ];
    statements.forEach((statement) => this.role.addToPolicy(statement));
  }

  /** The same findings as start_from_tag's (docs/deploy.md, "Image Builder trigger"). */
  private acknowledge(stateMachine: sfn.StateMachine): void {
    const stack = Stack.of(this);
    const executions = `arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<${stack.resolve(
      stack.getLogicalId(stateMachine.node.defaultChild as CfnElement),
    )}.Name>:*`;
    const findings: [IConstruct, string, string][] = [
      [
        this.fn,
        'L1',
        'Python 3.13 matches the public Powertools layer used (python3.13), as for every task function.',
      ],
      [
        this.role,
        'IAM5[Resource::*]',
        'Granted by CDK for X-Ray tracing (PutTraceSegments), which has no resource-level permission.',
      ],
      [
        this.role,
        `IAM5[Resource::${executions}]`,
        'DescribeExecution of the execution it named (imagebuilder-<AMI id>) finds an existing start; the statement covers the executions of this one state machine.',
      ],
      [
        this.role,
        'IAM5[Resource::arn:<AWS::Partition>:imagebuilder:<AWS::Region>:<AWS::AccountId>:image/*/*/*]',
        'Image build version ARNs are named after the recipe, not the pipeline, and are not known before a build; the function reads the image and ignores it unless a listed pipeline built it.',
      ],
    ];
    for (const [on, rule, reason] of findings) {
      Validations.of(on).acknowledge({ id: `${NAG}${rule}`, reason });
    }
  }
}
