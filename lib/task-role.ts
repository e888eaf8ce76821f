import { ArnFormat, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';
import { deliveredOutputDenies } from './delivered-outputs';
import { BATCH_RESULTS_PREFIX } from './source-blocks-bucket';
import { DELIVERED_TAG, EXECUTION_TAG, ROLE_TAG, SNAPSHOT_ROLE, STACK_TAG } from './tags';

export { DELIVERED_TAG, STACK_TAG };

export interface TaskRoleProps {
  readonly stackName: string;
  readonly subnetIds: string[];
  readonly securityGroupId: string;
  readonly launchTemplateId: string;
  readonly amiParameterName: string;
  readonly instanceRole: iam.IRole;
  readonly documentName: string;
  /** The data-plane program's asset object: start_compaction signs the instance's GET of it (lib/command-document.ts). */
  readonly programObjectArn: string;
  /** check_compaction reads the tail of the command's stderr stream here (its progress lines). */
  readonly commandLogGroupArn: string;
  /** Keys the workflow may use through EC2. */
  readonly kmsKeyArns: string[];
  /** The source snapshots' block lists (lib/source-blocks-bucket.ts). */
  readonly sourceBlocksBucket: s3.IBucket;
  /** The batch results (lib/source-blocks-bucket.ts BatchResultsBucket): read by summarize_batch, which writes the report. */
  readonly batchResultsBucket: s3.IBucket;
  /** The batch state machine's name (fixed, so this role can name its executions without a dependency cycle). */
  readonly batchStateMachineName: string;
}

/** What every statement below is built from: the stack's ARNs and the stack-tag conditions. */
interface StatementContext {
  readonly stack: Stack;
  readonly props: TaskRoleProps;
  /** `arn:...:ec2:<region>:<account>:<resource>/*`; account '' for snapshots and images of any account. */
  readonly ec2Arn: (resource: string, account?: string) => string;
  /** The request creates the resource with the stack tag. */
  readonly requestTagged: { StringEquals: Record<string, string> };
  /** The resource acted on carries the stack tag. */
  readonly resourceTagged: { StringEquals: Record<string, string> };
  readonly launchTemplateArn: string;
  /**
   * Every resource RunInstances authorizes carries ec2:LaunchTemplate when the call names a template
   * (IAM data: all of them except the Spot request), so nothing can be launched without the stack's own.
   */
  readonly withTheStacksTemplate: Record<string, string>;
}

function statementContext(stack: Stack, props: TaskRoleProps): StatementContext {
  const launchTemplateArn = stack.formatArn({
    service: 'ec2',
    resource: 'launch-template',
    resourceName: props.launchTemplateId,
  });
  return {
    stack,
    props,
    ec2Arn: (resource, account = stack.account) =>
      stack.formatArn({ service: 'ec2', resource, resourceName: '*', account }),
    requestTagged: { StringEquals: { [`aws:RequestTag/${STACK_TAG}`]: props.stackName } },
    resourceTagged: { StringEquals: { [`aws:ResourceTag/${STACK_TAG}`]: props.stackName } },
    launchTemplateArn,
    withTheStacksTemplate: { 'ec2:LaunchTemplate': launchTemplateArn },
  };
}

/**
 * The Describe/Get calls of one function (its `describes` in contract/tasks.json): none of them supports
 * resource-level permissions, so each function gets exactly the ones it calls (the twin's IAM check fails on any
 * other, and its usage report on a statement no call needs).
 */
function describeStatement(actions: readonly string[]): iam.PolicyStatement {
  return new iam.PolicyStatement({ sid: 'Describe', actions: [...actions], resources: ['*'] });
}

/** The subnets, security group, template, interfaces and AMI snapshots a launch names. */
function launchNetworkArns(c: StatementContext): string[] {
  return [
    ...c.props.subnetIds.map((subnetId) =>
      c.stack.formatArn({ service: 'ec2', resource: 'subnet', resourceName: subnetId }),
    ),
    c.stack.formatArn({ service: 'ec2', resource: 'security-group', resourceName: c.props.securityGroupId }),
    c.launchTemplateArn,
    c.ec2Arn('network-interface'),
    // The AMI's own snapshots (no source snapshot is mapped at launch any more).
    c.ec2Arn('snapshot', ''),
  ];
}

/** RunInstances only from the stack's launch template, tagged, with an Amazon-owned image. */
function launchStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'LaunchTaggedInstancesAndVolumesFromTheStacksTemplate',
      actions: ['ec2:RunInstances'],
      resources: [c.ec2Arn('instance'), c.ec2Arn('volume')],
      conditions: { StringEquals: { ...c.requestTagged.StringEquals, ...c.withTheStacksTemplate } },
    }),
    new iam.PolicyStatement({
      sid: 'RunInstancesWithTheStacksTemplateAndNetwork',
      actions: ['ec2:RunInstances'],
      resources: launchNetworkArns(c),
      conditions: { StringEquals: c.withTheStacksTemplate },
    }),
    new iam.PolicyStatement({
      sid: 'RunInstancesOnlyFromAmazonOwnedImages',
      actions: ['ec2:RunInstances'],
      // The template's image is the public AL2023 AMI of an SSM parameter (resolve:ssm:); EC2 authorizes the
      // resolved image, whose owner alias is "amazon".
      resources: [c.ec2Arn('image', '')],
      conditions: { StringEquals: { ...c.withTheStacksTemplate, 'ec2:Owner': 'amazon' } },
    }),
    new iam.PolicyStatement({
      sid: 'RunSpotInstances',
      actions: ['ec2:RunInstances'],
      // The Spot request of a Spot launch; it ends with the instance and is never acted on later. It has no
      // ec2:LaunchTemplate key; the instance statement above still requires the template.
      resources: [c.ec2Arn('spot-instances-request')],
    }),
    new iam.PolicyStatement({
      sid: 'ResolveTheAmiParameterOfTheLaunchTemplate',
      actions: ['ssm:GetParameters', 'ssm:GetParameter'],
      resources: [
        c.stack.formatArn({
          service: 'ssm',
          resource: 'parameter',
          resourceName: c.props.amiParameterName.replace(/^\//, ''),
          account: '',
        }),
      ],
    }),
  ];
}

/** Source volumes: tagged, from any source snapshot. */
function volumeStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'CreateTaggedVolumes',
      actions: ['ec2:CreateVolume'],
      resources: [c.ec2Arn('volume')],
      conditions: c.requestTagged,
    }),
    new iam.PolicyStatement({
      sid: 'CreateVolumesFromAnySourceSnapshot',
      actions: ['ec2:CreateVolume'],
      // Source snapshots may be shared by other accounts; the volume must carry the stack tag (above).
      resources: [c.ec2Arn('snapshot', '')],
    }),
  ];
}

/** Tags only while creating, plus the delivered tag on the stack's own snapshots. */
function tagStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'TagOnlyWhileCreating',
      actions: ['ec2:CreateTags'],
      resources: [
        c.ec2Arn('instance'),
        c.ec2Arn('volume'),
        c.ec2Arn('spot-instances-request'),
        c.ec2Arn('snapshot', ''),
        c.ec2Arn('image', ''),
      ],
      conditions: {
        StringEquals: {
          'ec2:CreateAction': ['RunInstances', 'CreateVolume', 'CreateSnapshot', 'RegisterImage'],
        },
      },
    }),
    new iam.PolicyStatement({
      sid: 'MarkTheStacksSnapshotsDelivered',
      actions: ['ec2:CreateTags'],
      resources: [c.ec2Arn('snapshot', '')],
      conditions: {
        StringEquals: { ...c.resourceTagged.StringEquals, [`aws:RequestTag/${DELIVERED_TAG}`]: 'true' },
        'ForAllValues:StringEquals': { 'aws:TagKeys': [DELIVERED_TAG] },
      },
    }),
  ];
}

/** New snapshots of the stack's volumes and images of the stack's snapshots, tagged. */
function snapshotAndImageStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'SnapshotTheStacksVolumes',
      actions: ['ec2:CreateSnapshot'],
      resources: [c.ec2Arn('volume')],
      conditions: c.resourceTagged,
    }),
    new iam.PolicyStatement({
      sid: 'CreateTaggedSnapshots',
      actions: ['ec2:CreateSnapshot'],
      resources: [c.ec2Arn('snapshot', '')],
      conditions: c.requestTagged,
    }),
    new iam.PolicyStatement({
      sid: 'RegisterTaggedImages',
      actions: ['ec2:RegisterImage'],
      resources: [c.ec2Arn('image', '')],
      conditions: c.requestTagged,
    }),
    new iam.PolicyStatement({
      sid: 'RegisterImagesFromTheStacksSnapshots',
      actions: ['ec2:RegisterImage'],
      resources: [c.ec2Arn('snapshot', '')],
      conditions: c.resourceTagged,
    }),
  ];
}

/**
 * Attach, delete, terminate, deregister and enable FSR only on what carries the stack tag; one statement per
 * function that needs it. The Denies that keep delivered outputs (lib/delivered-outputs.ts) go with every role
 * that may delete, deregister or tag (DENY_GUARDS).
 */
function changeStatements(c: StatementContext): iam.PolicyStatement[] {
  const stacks = (sid: string, actions: string[], resources: string[]): iam.PolicyStatement =>
    new iam.PolicyStatement({ sid, actions, resources, conditions: c.resourceTagged });
  return [
    stacks(
      'AttachOnlyTheStacksVolumesToTheStacksInstances',
      ['ec2:AttachVolume'],
      [c.ec2Arn('instance'), c.ec2Arn('volume')],
    ),
    stacks(
      'RemoveOnlyTheStacksResources',
      ['ec2:TerminateInstances', 'ec2:DeleteVolume', 'ec2:DeleteSnapshot', 'ec2:DeregisterImage'],
      [c.ec2Arn('instance'), c.ec2Arn('volume'), c.ec2Arn('snapshot', ''), c.ec2Arn('image', '')],
    ),
    stacks(
      'EnableFastSnapshotRestoreOnTheStacksSnapshots',
      ['ec2:EnableFastSnapshotRestores'],
      [c.ec2Arn('snapshot', '')],
    ),
  ];
}

/**
 * copySharing (lambdas/compactor/sharing.py): launch permissions, create-volume permissions and the deprecation
 * time of the stack's own new AMIs and snapshots only (all three actions take aws:ResourceTag on image/snapshot).
 */
function sharingStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'ShareOnlyTheStacksImagesAndSnapshots',
      actions: ['ec2:ModifyImageAttribute', 'ec2:ModifySnapshotAttribute', 'ec2:EnableImageDeprecation'],
      resources: [c.ec2Arn('image', ''), c.ec2Arn('snapshot', '')],
      conditions: c.resourceTagged,
    }),
  ];
}

/** Sharing a snapshot with everyone (group all) is denied outright: the code never asks, the policy makes sure. */
function neverPublic(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'NeverMakeSnapshotsPublic',
      effect: iam.Effect.DENY,
      actions: ['ec2:ModifySnapshotAttribute'],
      resources: [c.ec2Arn('snapshot', '')],
      conditions: { 'ForAnyValue:StringEquals': { 'ec2:Add/group': 'all' } },
    }),
  ];
}

/** Pass the instance role to EC2; create the Spot service-linked role. */
function iamStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'PassOnlyTheTransferInstanceRoleToEc2',
      actions: ['iam:PassRole'],
      resources: [c.props.instanceRole.roleArn],
      conditions: { StringEquals: { 'iam:PassedToService': 'ec2.amazonaws.com' } },
    }),
    // An account's first Spot launch creates EC2's Spot service-linked role; without this RunInstances fails
    // with AuthFailure.ServiceLinkedRoleCreationNotPermitted instead of launching (or falling back).
    new iam.PolicyStatement({
      sid: 'CreateTheSpotServiceLinkedRole',
      actions: ['iam:CreateServiceLinkedRole'],
      resources: [
        c.stack.formatArn({
          service: 'iam',
          region: '',
          resource: 'role',
          resourceName: 'aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot',
        }),
      ],
      conditions: { StringEquals: { 'iam:AWSServiceName': 'spot.amazonaws.com' } },
    }),
  ];
}

/** The stack's Command document, sent only to the stack's instances. */
function commandStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'SendTheCompactionDocument',
      actions: ['ssm:SendCommand'],
      resources: [
        c.stack.formatArn({ service: 'ssm', resource: 'document', resourceName: c.props.documentName }),
      ],
    }),
    new iam.PolicyStatement({
      sid: 'SendCommandsOnlyToTheStacksInstances',
      actions: ['ssm:SendCommand'],
      resources: [c.ec2Arn('instance')],
      conditions: { StringEquals: { [`ssm:resourceTag/${STACK_TAG}`]: c.props.stackName } },
    }),
    new iam.PolicyStatement({
      // The log group's ARN ends in :* and so names its streams (GetLogEvents acts on a stream).
      sid: 'ReadTheCommandsProgressFromItsLogGroup',
      actions: ['logs:GetLogEvents'],
      resources: [c.props.commandLogGroupArn],
    }),
  ];
}

/** The kmsKeyArns setting: used only through EC2, described before a launch. */
function keyStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'UseKeysOnlyThroughEc2',
      actions: ['kms:Decrypt', 'kms:ReEncrypt*', 'kms:GenerateDataKeyWithoutPlaintext', 'kms:CreateGrant'],
      resources: c.props.kmsKeyArns,
      conditions: { StringEquals: { 'kms:ViaService': `ec2.${c.stack.region}.${c.stack.urlSuffix}` } },
    }),
    new iam.PolicyStatement({
      sid: 'CheckKeysBeforeLaunching',
      actions: ['kms:DescribeKey'],
      resources: c.props.kmsKeyArns,
    }),
  ];
}

/**
 * The request tags every new snapshot of the stack carries (snapshots._new_snapshot_tags): the stack's name,
 * an execution (present; its value is not known to a static policy) and role `snapshot`.
 */
export function newSnapshotTagConditions(stackName: string): Record<string, Record<string, string>> {
  return {
    StringEquals: {
      [`aws:RequestTag/${STACK_TAG}`]: stackName,
      [`aws:RequestTag/${ROLE_TAG}`]: SNAPSHOT_ROLE,
    },
    Null: { [`aws:RequestTag/${EXECUTION_TAG}`]: 'false' },
  };
}

/**
 * The KMS actions the EBS direct APIs need on the key of an encrypted snapshot (EBS user guide, "Control access
 * to EBS direct APIs using IAM", "Permissions to use AWS KMS keys"; kms:DescribeKey is granted apart, and the
 * guide's ec2:CreateTags is not a KMS action).
 */
export const EBS_DIRECT_KMS_ACTIONS = [
  'kms:CreateGrant',
  'kms:Decrypt',
  'kms:Encrypt',
  'kms:GenerateDataKey',
  'kms:GenerateDataKeyWithoutPlaintext',
  'kms:ReEncrypt*',
];

/**
 * kms:ViaService for the EBS direct APIs. AWS documents no value for them (EBS's own entry in the KMS guide
 * is ec2.<region>.amazonaws.com, the direct APIs' endpoint is ebs.<region>.amazonaws.com, and
 * ebs-fips.<region>.amazonaws.com where the Region has a FIPS endpoint, which the data plane uses with
 * AWS_USE_FIPS_ENDPOINT=true): all are EBS, nothing else may use the keys through this grant. The suffix is the
 * partition's (Aws.URL_SUFFIX: amazonaws.com.cn in China, c2s.ic.gov in ISO), as the data plane's endpoint is
 * (IMDS services/domain). A FIPS value in a Region without FIPS endpoints never matches.
 */
export function ebsViaServices(stack: Stack): string[] {
  return ['ec2', 'ebs', 'ebs-fips'].map((service) => `${service}.${stack.region}.${stack.urlSuffix}`);
}

/**
 * target snapshot (start_compaction): StartSnapshot of the stack's new snapshots only, tagged at start. A
 * StartSnapshot with Tags also authorizes ec2:CreateTags (Service Authorization Reference, EBS API operations:
 * StartSnapshot -> ebs:StartSnapshot, ec2:CreateTags, with no static ec2:CreateAction value listed), so the
 * tag grant is conditioned on the same request tags and not on ec2:CreateAction. What that leaves open: a plain
 * CreateTags that puts exactly these three ownership tags on an existing snapshot of the account; no code of the
 * stack makes that call. Encrypted snapshots: the kmsKeyArns setting's keys, only through EBS.
 */
function directSnapshotStatements(c: StatementContext): iam.PolicyStatement[] {
  const newSnapshot = newSnapshotTagConditions(c.props.stackName);
  return [
    new iam.PolicyStatement({
      sid: 'StartTheStacksDirectSnapshots',
      // iam-data: StartSnapshot authorizes the (new) snapshot with aws:RequestTag/*, aws:TagKeys, ebs:VolumeSize,
      // ebs:Description and ebs:ParentSnapshot; start_compaction starts without a parent.
      actions: ['ebs:StartSnapshot'],
      resources: [c.ec2Arn('snapshot', '')],
      conditions: { ...newSnapshot, Null: { ...newSnapshot.Null, 'ebs:ParentSnapshot': 'true' } },
    }),
    new iam.PolicyStatement({
      sid: 'TagDirectSnapshotsWhileStarting',
      actions: ['ec2:CreateTags'],
      resources: [c.ec2Arn('snapshot', '')],
      conditions: newSnapshot,
    }),
    new iam.PolicyStatement({
      sid: 'StartEncryptedDirectSnapshotsThroughEbs',
      actions: EBS_DIRECT_KMS_ACTIONS,
      resources: c.props.kmsKeyArns,
      conditions: { StringEquals: { 'kms:ViaService': ebsViaServices(c.stack) } },
    }),
  ];
}

/** List the source snapshots' blocks (metadata only) and keep the lists in the stack's bucket. */
function blockListStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'ListTheBlocksOfAnySourceSnapshot',
      // Metadata only (block indexes), never data: GetSnapshotBlock is not granted. Source snapshots may be
      // shared by other accounts, so they cannot be listed by ARN.
      actions: ['ebs:ListSnapshotBlocks'],
      resources: [c.ec2Arn('snapshot', '')],
    }),
    new iam.PolicyStatement({
      sid: 'ReadEncryptedSnapshotsThroughEbs',
      // ListSnapshotBlocks of an encrypted snapshot needs its key (EBS direct APIs, "Control access"); only
      // through EBS. If EBS evaluates it otherwise, the listing is refused and that volume is copied without a
      // block list (compactor/source_blocks.py): slower, never wrong.
      actions: ['kms:Decrypt'],
      resources: c.props.kmsKeyArns,
      conditions: { StringEquals: { 'kms:ViaService': `ebs.${c.stack.region}.${c.stack.urlSuffix}` } },
    }),
    new iam.PolicyStatement({
      sid: 'KeepTheBlockListsInTheStacksBucket',
      actions: ['s3:PutObject', 's3:GetObject', 's3:DeleteObject'],
      resources: [c.props.sourceBlocksBucket.arnForObjects('*')],
    }),
    new iam.PolicyStatement({
      sid: 'SignTheInstancesGetOfTheBlockLists',
      // start_compaction signs the instance's GET with its role, so the instance role needs no S3 grant.
      actions: ['s3:GetObject'],
      resources: [c.props.sourceBlocksBucket.arnForObjects('*')],
    }),
    new iam.PolicyStatement({
      sid: 'DeleteAnExecutionsBlockLists',
      actions: ['s3:DeleteObject'],
      resources: [c.props.sourceBlocksBucket.arnForObjects('*')],
    }),
    new iam.PolicyStatement({
      sid: 'SignTheInstancesGetOfTheProgram',
      // The data-plane program (a file asset in the CDK bootstrap bucket), this object only: start_compaction
      // presigns its GET, so the instance role needs no S3 grant; the document pins the program's SHA-256.
      actions: ['s3:GetObject'],
      resources: [c.props.programObjectArn],
    }),
    new iam.PolicyStatement({
      sid: 'FindAnExecutionsBlockLists',
      actions: ['s3:ListBucket'],
      resources: [c.props.sourceBlocksBucket.bucketArn],
    }),
  ];
}

/**
 * summarize_batch reads the Map's result files and writes the batch report, all under `batches/`; it lists the
 * prefix when the Map failed before telling where its files are.
 */
function batchResultStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'ReadBatchResultsAndWriteBatchReports',
      actions: ['s3:GetObject', 's3:PutObject'],
      resources: [c.props.batchResultsBucket.arnForObjects(`${BATCH_RESULTS_PREFIX}/*`)],
    }),
    new iam.PolicyStatement({
      sid: 'FindABatchsResultFiles',
      // No s3:prefix condition: a GetObject carries no prefix, and without an unconditioned ListBucket S3 answers
      // a missing key (a failed Map's manifest) with 403 AccessDenied instead of 404. The bucket holds only batches.
      actions: ['s3:ListBucket'],
      resources: [c.props.batchResultsBucket.bucketArn],
    }),
    new iam.PolicyStatement({
      sid: 'FindAFailedBatchsMapRun',
      // After the Map failed, its Catch output does not name the map run; ListMapRuns of the batch execution does.
      actions: ['states:ListMapRuns'],
      resources: [
        c.stack.formatArn({
          service: 'states',
          resource: 'execution',
          resourceName: `${c.props.batchStateMachineName}:*`,
          arnFormat: ArnFormat.COLON_RESOURCE_NAME,
        }),
      ],
    }),
  ];
}

/** The completion event on the default bus. */
function eventStatements(c: StatementContext): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'PublishCompletionEvents',
      actions: ['events:PutEvents'],
      resources: [c.stack.formatArn({ service: 'events', resource: 'event-bus', resourceName: 'default' })],
    }),
  ];
}

/** The Allow statements a task may be granted (by Sid, in its `grants` of contract/tasks.json). */
const GRANTS: ((c: StatementContext) => iam.PolicyStatement[])[] = [
  launchStatements,
  volumeStatements,
  tagStatements,
  snapshotAndImageStatements,
  changeStatements,
  sharingStatements,
  iamStatements,
  commandStatements,
  keyStatements,
  directSnapshotStatements,
  blockListStatements,
  batchResultStatements,
  eventStatements,
];

/**
 * Denies that go with every role allowed one of `whenAllowed`: they keep what such a role could otherwise change
 * (a delivered output, a public snapshot) out of its reach.
 */
const DENY_GUARDS: { whenAllowed: string[]; denies: (c: StatementContext) => iam.PolicyStatement[] }[] = [
  {
    whenAllowed: ['ec2:DeleteSnapshot', 'ec2:DeregisterImage', 'ec2:CreateTags'],
    denies: (c) => deliveredOutputDenies(c.stack),
  },
  { whenAllowed: ['ec2:ModifySnapshotAttribute'], denies: neverPublic },
];

/** What contract/tasks.json says a task function may do. */
export interface TaskGrants {
  readonly module: string;
  /** Sids of the statements above. */
  readonly grants: readonly string[];
  /** Its Describe/Get actions (resource `*`). */
  readonly describes: readonly string[];
}

/** Every grantable statement by Sid; a Sid written twice would make `grants` ambiguous. */
function grantCatalog(c: StatementContext): Map<string, iam.PolicyStatement> {
  const catalog = new Map<string, iam.PolicyStatement>();
  for (const statement of GRANTS.flatMap((concern) => concern(c))) {
    const sid = statement.sid!;
    if (catalog.has(sid)) throw new Error(`lib/task-role.ts defines statement ${sid} twice`);
    catalog.set(sid, statement);
  }
  return catalog;
}

/** A task's statements: its grants, its Describe statement, and the Denies its grants call for. */
function taskStatements(
  c: StatementContext,
  catalog: Map<string, iam.PolicyStatement>,
  task: TaskGrants,
): iam.PolicyStatement[] {
  const unknown = task.grants.filter((sid) => !catalog.has(sid));
  if (unknown.length > 0) {
    throw new Error(
      `contract/tasks.json grants ${task.module} ${unknown.join(', ')}, which lib/task-role.ts does not define ` +
        `(it defines ${[...catalog.keys()].join(', ')})`,
    );
  }
  const allowed = task.grants.map((sid) => catalog.get(sid)!);
  if (task.describes.length > 0) allowed.unshift(describeStatement(task.describes));
  const actions = new Set(allowed.flatMap((statement) => statement.actions));
  const guards = DENY_GUARDS.filter((guard) => guard.whenAllowed.some((action) => actions.has(action)));
  return [...guards.flatMap((guard) => guard.denies(c)), ...allowed];
}

/** Construct id of a module's role: `launch` -> `Launch`, `check_instance` -> `CheckInstance`. */
function roleId(module: string): string {
  return module
    .split('_')
    .map((word) => word[0].toUpperCase() + word.slice(1))
    .join('');
}

/**
 * One role per task function, with only the statements contract/tasks.json grants it. Everything that creates
 * resources must tag them with the stack tag (aws:RequestTag) and everything that changes or deletes resources
 * needs that tag on them (aws:ResourceTag), so the functions cannot touch anything this stack did not make.
 */
export class TaskRoles extends Construct {
  public readonly roles: Record<string, iam.Role>;

  constructor(
    scope: Construct,
    id: string,
    props: TaskRoleProps & { readonly tasks: readonly TaskGrants[] },
  ) {
    super(scope, id);
    const context = statementContext(Stack.of(this), props);
    const catalog = grantCatalog(context);
    const granted = new Set(props.tasks.flatMap((task) => task.grants));
    const ungranted = [...catalog.keys()].filter((sid) => !granted.has(sid));
    if (ungranted.length > 0) {
      throw new Error(
        `lib/task-role.ts defines ${ungranted.join(', ')}, which no task of contract/tasks.json grants`,
      );
    }
    this.roles = Object.fromEntries(
      props.tasks.map((task) => [
        task.module,
        new iam.Role(this, roleId(task.module), {
          assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
          description: `ebs-snapshot-compactor task ${task.module}: acts only on resources tagged with this stack`,
          inlinePolicies: {
            Task: new iam.PolicyDocument({ statements: taskStatements(context, catalog, task) }),
          },
        }),
      ]),
    );
  }

  /** Lets a function write to its own log group and nowhere else (the ARN ends in :*). */
  allowLogging(module: string, logGroupArn: string): void {
    this.roles[module].addToPolicy(
      new iam.PolicyStatement({
        sid: 'WriteOwnLogs',
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [logGroupArn],
      }),
    );
  }
}
