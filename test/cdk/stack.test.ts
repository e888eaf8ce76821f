import * as fs from 'fs';
import * as path from 'path';
import { App, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as os from 'os';
import contractEnvironment from '../../contract/environment.json';
import {
  checkedEnvironment,
  contractEnvironmentKeys,
  CONTRACT_TASKS,
  POWERTOOLS_ENVIRONMENT,
  DEFAULT_STACK_MODULES,
  writeLambdaAsset,
} from '../../lib/task-functions';
import { programArchive, programSha256 } from '../../lib/command-document';
import { TaskRoles } from '../../lib/task-role';
import { freshTemplate } from './stack-synth';
import {
  expectDeliveredOutputDenies,
  synthTemplate,
  taskRoleStatements,
  taskRoleStatementsByModule,
} from './support';

const STACK_TAG = 'ebs-snapshot-compactor:stack';

type Statement = {
  Sid?: string;
  Effect?: string;
  Action: string | string[];
  Resource: unknown;
  Condition?: Record<string, Record<string, unknown>>;
};

function roleStatements(template: Template, descriptionStart: string): Statement[] {
  const roles = Object.values(template.findResources('AWS::IAM::Role')).filter((role) =>
    String(role.Properties.Description ?? '').startsWith(descriptionStart),
  );
  expect(roles).toHaveLength(1);
  const inline = (roles[0].Properties.Policies ?? []).flatMap(
    (policy: { PolicyDocument: { Statement: Statement[] } }) => policy.PolicyDocument.Statement,
  );
  return inline;
}

function actionsOf(statement: Statement): string[] {
  return Array.isArray(statement.Action) ? statement.Action : [statement.Action];
}

function statementsWith(statements: Statement[], action: string): Statement[] {
  return statements.filter((statement) => actionsOf(statement).includes(action));
}

/**
 * The stack's own functions (handler compactor.handlers.*), by logical id: CDK adds provider functions of its
 * own (e.g. the AwsCustomResource of the S3 prefix list lookup) that carry no task environment.
 */
function compactorFunctions(template: Template): Record<string, ReturnType<Template['toJSON']>> {
  return Object.fromEntries(
    Object.entries(template.findResources('AWS::Lambda::Function')).filter(([, fn]) =>
      String(fn.Properties.Handler).startsWith('compactor.handlers.'),
    ),
  );
}

/** Whether a function is a workflow task (not start_from_tag, sweep or another rule or schedule target). */
function isWorkflowFunction(fn: ReturnType<Template['toJSON']>): boolean {
  const module = String(fn.Properties.Handler).split('.')[2];
  return CONTRACT_TASKS.some((t) => t.workflow && t.module === module);
}

/** The workflow's task functions (not start_from_tag or sweep), as a Template for allResourcesProperties. */
function workflowFunctionsTemplate(template: Template): Template {
  const functions = compactorFunctions(template);
  return Template.fromJSON({
    Resources: Object.fromEntries(Object.entries(functions).filter(([, fn]) => isWorkflowFunction(fn))),
  });
}

/**
 * Every workflow function's variables in one object (each function gets only its own keys): a key two
 * functions get has the same value in both.
 */
function workflowEnvironmentValues(template: Template): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const fn of Object.values(compactorFunctions(template)).filter(isWorkflowFunction)) {
    for (const [key, value] of Object.entries(
      fn.Properties.Environment.Variables as Record<string, unknown>,
    )) {
      if (key in values) expect({ key, value }).toEqual({ key, value: values[key] });
      values[key] = value;
    }
  }
  return values;
}

/** Statements of the AWS::IAM::Policy resources attached to the role whose logical id starts so. */
function attachedPolicyStatements(template: Template, roleIdStart: string): Statement[] {
  return Object.values(template.findResources('AWS::IAM::Policy'))
    .filter((policy) =>
      (policy.Properties.Roles as { Ref: string }[]).some((role) => role.Ref.startsWith(roleIdStart)),
    )
    .flatMap((policy) => policy.Properties.PolicyDocument.Statement as Statement[]);
}

describe('default stack', () => {
  const template = synthTemplate();
  // synthesized again, in this process: the template above is the template server's (template-cache.ts)
  let fresh: Template | undefined;
  const synthAgain = (): Template => (fresh ??= freshTemplate());
  const taskStatements = taskRoleStatements<Statement>(template);

  test('one Python 3.13 function per task, handler compactor.handlers.<module>.handler, traced', () => {
    const functions = Object.values(compactorFunctions(template));
    expect(functions.map((fn) => fn.Properties.Handler).sort()).toEqual(
      DEFAULT_STACK_MODULES.map((module) => `compactor.handlers.${module}.handler`).sort(),
    );
    for (const fn of functions) {
      expect(fn.Properties.Runtime).toBe('python3.13');
      expect(fn.Properties.TracingConfig).toEqual({ Mode: 'Active' });
      expect(fn.Properties.Layers).toHaveLength(1);
    }
  });

  test('every function gets the environment of the contract; only start_from_tag gets STATE_MACHINE_ARN', () => {
    const expected = {
      STACK_NAME: 'EbsSnapshotCompactor',
      SUBNET_IDS: Match.anyValue(),
      LAUNCH_TEMPLATE_ID: Match.anyValue(),
      INSTANCE_TYPES: '',
      ARCHITECTURE: 'x86_64',
      STATE_MACHINE_TIMEOUT_MINUTES: '2880',
      COMPACTION_POLL_SECONDS: '120',
      SOURCE_BLOCKS_BUCKET: { Ref: Match.stringLikeRegexp('^SourceBlocksBucket') },
      BATCH_RESULTS_BUCKET: { Ref: Match.stringLikeRegexp('^BatchResultsBucket') },
      // the data-plane program's file asset in the CDK bootstrap bucket (lib/command-document.ts)
      PROGRAM_BUCKET: { 'Fn::Sub': 'cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}' },
      PROGRAM_KEY: Match.stringLikeRegexp('^[0-9a-f]{64}\\.pyz$'),
      ALLOW_ON_DEMAND: 'true',
      SOURCE_VOLUME_IOPS: '16000',
      SOURCE_VOLUME_THROUGHPUT: '1000',
      VOLUME_INITIALIZATION_RATE: '0',
      MAX_VOLUME_GIB: '16384',
      DOCUMENT_NAME: Match.anyValue(),
      COMMAND_LOG_GROUP: Match.anyValue(),
      EVENT_BUS_NAME: 'default',
      TRIGGER_TAG_KEY: 'compact',
      ROOT_DEVICE_NAME: '/dev/xvda',
      ROOT_VOLUME_GIB: '8',
      POWERTOOLS_SERVICE_NAME: 'ebs-snapshot-compactor',
      POWERTOOLS_METRICS_NAMESPACE: 'EbsSnapshotCompactor',
      LOG_LEVEL: 'INFO',
    };
    const functions = Object.values(compactorFunctions(template));
    for (const fn of functions) {
      const variables = fn.Properties.Environment.Variables;
      if (fn.Properties.Handler === 'compactor.handlers.start_from_tag.handler') {
        // Only what compactor/trigger.py reads, plus Powertools.
        expect(variables).toEqual({
          STATE_MACHINE_ARN: { Ref: expect.stringMatching(/^WorkflowStateMachine/) },
          TRIGGER_TAG_KEY: 'compact',
          POWERTOOLS_SERVICE_NAME: 'ebs-snapshot-compactor',
          POWERTOOLS_METRICS_NAMESPACE: 'EbsSnapshotCompactor',
          LOG_LEVEL: 'INFO',
        });
      } else if (isWorkflowFunction(fn)) {
        // each workflow function: its own keys (next test), each with the workflow's value
        const own = Object.fromEntries(
          Object.entries(expected).filter(([key]) => Object.keys(variables).includes(key)),
        );
        Template.fromJSON({ Resources: { Fn: fn } }).hasResourceProperties('AWS::Lambda::Function', {
          Environment: { Variables: Match.objectEquals(own) },
        });
      }
    }
    const workflowFunctions = Object.fromEntries(
      Object.entries(compactorFunctions(template)).filter(([, fn]) => isWorkflowFunction(fn)),
    );
    expect(Object.keys(workflowFunctions)).toHaveLength(CONTRACT_TASKS.filter((t) => t.workflow).length);
    // between them the workflow functions get every workflow key
    const given = new Set(
      Object.values(workflowFunctions).flatMap((fn) => Object.keys(fn.Properties.Environment.Variables)),
    );
    expect([...given].sort()).toEqual(Object.keys(expected).sort());
  });

  test('each function gets exactly the environment keys contract/environment.json gives it', () => {
    const workflowModules = new Set(CONTRACT_TASKS.filter((t) => t.workflow).map((t) => t.module));
    const keysFor = (module: string) =>
      contractEnvironment.variables
        .filter(
          (v) =>
            v.functions.includes(module) || (workflowModules.has(module) && v.functions.includes('workflow')),
        )
        .map((v) => v.name)
        .sort();
    for (const fn of Object.values(compactorFunctions(template))) {
      const module = String(fn.Properties.Handler).split('.')[2];
      const expected = keysFor(module);
      expect({ module, keys: Object.keys(fn.Properties.Environment.Variables).sort() }).toEqual({
        module,
        keys: expected,
      });
    }
    // e.g. check_instance reads no setting, launch the launch's and not the bucket of the batch results
    const variablesOf = (module: string) =>
      Object.keys(
        Object.values(compactorFunctions(template)).find(
          (fn) => fn.Properties.Handler === `compactor.handlers.${module}.handler`,
        )!.Properties.Environment.Variables,
      );
    expect(variablesOf('check_instance').sort()).toEqual(Object.keys(POWERTOOLS_ENVIRONMENT).sort());
    expect(variablesOf('launch')).toContain('LAUNCH_TEMPLATE_ID');
    expect(variablesOf('launch')).not.toContain('BATCH_RESULTS_BUCKET');
    // the Powertools keys carry the contract's values
    for (const v of contractEnvironment.variables.filter((v) => v.readBy === 'Powertools')) {
      expect(POWERTOOLS_ENVIRONMENT[v.name]).toBe((v as { value?: string }).value);
    }
  });

  test('a workflow environment that leaves out or adds a key fails the synth', () => {
    const keys = contractEnvironmentKeys('workflow');
    const values = Object.fromEntries(keys.map((key) => [key, 'x']));
    expect(checkedEnvironment('workflow', values)).toBe(values);
    const missing = Object.fromEntries(Object.entries(values).filter(([key]) => key !== 'STACK_NAME'));
    expect(() => checkedEnvironment('workflow', missing)).toThrow(/contract\/environment.json/);
    expect(() => checkedEnvironment('workflow', { ...values, EXTRA: 'x' })).toThrow(/sets .*EXTRA/);
  });

  test('the Lambda asset is the package and the contract beside it, without tests or caches, and stable', () => {
    const assetOf = (t: Template) => {
      const fns = Object.values(compactorFunctions(t));
      const keys = new Set(fns.map((fn) => JSON.stringify(fn.Properties.Code.S3Key)));
      expect(keys.size).toBe(1);
      return [...keys][0];
    };
    expect(assetOf(synthAgain())).toBe(assetOf(template));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lambda-asset-'));
    try {
      writeLambdaAsset(dir);
      expect(fs.readdirSync(dir).sort()).toEqual(['compactor', 'contract']);
      const files = (fs.readdirSync(dir, { recursive: true }) as string[]).map((f) => f.replace(/\\/g, '/'));
      expect(files).toContain('compactor/handlers/prepare.py');
      expect(files).toContain('contract/tasks.json');
      expect(
        files.filter((f) => /__pycache__|\.pyc$|(^|\/)tests?(\/|$)|test_|conftest|_cache/.test(f)),
      ).toEqual([]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a synth gives the same template every time: the one shared by the test files is the one synthesized here', () => {
    expect(synthAgain().toJSON()).toEqual(template.toJSON());
  });

  test('the Powertools layer comes from the public SSM parameter, resolved at deploy', () => {
    const parameters = template.toJSON().Parameters as Record<string, { Type: string; Default: string }>;
    const layer = Object.values(parameters).find((p) => p.Default?.startsWith('/aws/service/powertools/'));
    expect(layer).toEqual({
      Type: 'AWS::SSM::Parameter::Value<String>',
      Default: '/aws/service/powertools/python/x86_64/python3.13/latest',
    });
  });

  const LT = 'ec2:LaunchTemplate';
  test('RunInstances: every statement but the Spot request requires the stack launch template; instances and volumes the stack tag', () => {
    const runs = statementsWith(taskStatements, 'ec2:RunInstances');
    const spot = runs.filter((s) => JSON.stringify(s.Resource).includes(':spot-instances-request/'));
    expect(spot).toHaveLength(1);
    expect(JSON.stringify(spot[0].Resource)).not.toMatch(/:instance\/|:volume\/|:image\//);
    for (const statement of runs.filter((s) => s !== spot[0])) {
      expect(JSON.stringify(statement.Condition?.StringEquals?.[LT])).toMatch(
        /launch-template\/.*TransferInstanceLaunchTemplate/,
      );
    }
    const instances = runs.filter((s) => JSON.stringify(s.Resource).includes(':instance/*'));
    expect(instances).toHaveLength(1);
    expect(instances[0].Condition?.StringEquals?.[`aws:RequestTag/${STACK_TAG}`]).toBe(
      'EbsSnapshotCompactor',
    );
    expect(JSON.stringify(instances[0].Resource)).toMatch(/:volume\/\*/);
  });

  test('RunInstances: images only Amazon-owned', () => {
    const images = statementsWith(taskStatements, 'ec2:RunInstances').filter((s) =>
      JSON.stringify(s.Resource).includes(':image/'),
    );
    expect(images).toHaveLength(1);
    expect(images[0].Condition?.StringEquals?.['ec2:Owner']).toBe('amazon');
  });

  test('RunInstances network: only the stack subnets, its SG and its template', () => {
    const network = statementsWith(taskStatements, 'ec2:RunInstances').filter((s) =>
      JSON.stringify(s.Resource).includes('security-group/'),
    );
    expect(network).toHaveLength(1);
    const resources = JSON.stringify(network[0].Resource);
    expect(resources).not.toMatch(/:instance\/|:volume\/|:image\//);
    expect(resources).toMatch(/launch-template\//);
    expect(resources).toMatch(/VpctransferSubnet1/);
  });

  test('CreateVolume: the volume must carry the stack tag; any source snapshot', () => {
    const creates = statementsWith(taskStatements, 'ec2:CreateVolume');
    const volume = creates.filter((s) => JSON.stringify(s.Resource).includes(':volume/'));
    expect(volume).toHaveLength(1);
    expect(volume[0].Condition).toEqual({
      StringEquals: { [`aws:RequestTag/${STACK_TAG}`]: 'EbsSnapshotCompactor' },
    });
    const rest = creates.filter((s) => s !== volume[0]);
    expect(JSON.stringify(rest.map((s) => s.Resource))).not.toMatch(/:volume\/|:instance\//);
  });

  test('attaching, terminating and deleting need the stack tag on the resource', () => {
    for (const action of [
      'ec2:AttachVolume',
      'ec2:TerminateInstances',
      'ec2:DeleteVolume',
      'ec2:DeleteSnapshot',
      'ec2:DeregisterImage',
      'ec2:EnableFastSnapshotRestores',
    ]) {
      const statements = statementsWith(taskStatements, action).filter((s) => s.Effect !== 'Deny');
      expect(statements.length).toBeGreaterThan(0);
      for (const statement of statements) {
        expect(statement.Condition).toEqual({
          StringEquals: { [`aws:ResourceTag/${STACK_TAG}`]: 'EbsSnapshotCompactor' },
        });
      }
    }
  });

  test("each workflow function has a role of its own with exactly contract/tasks.json's grants", () => {
    const byModule = taskRoleStatementsByModule<Statement>(template);
    const workflow = CONTRACT_TASKS.filter((t) => t.workflow);
    expect(Object.keys(byModule).sort()).toEqual(workflow.map((t) => t.module).sort());
    const functions = Object.values(compactorFunctions(template)).filter(isWorkflowFunction);
    const roles = functions.map((fn) => JSON.stringify(fn.Properties.Role));
    expect(new Set(roles).size).toBe(functions.length);
    for (const task of workflow) {
      const allows = byModule[task.module].filter((s) => s.Effect !== 'Deny');
      const expected = [...(task.describes!.length > 0 ? ['Describe'] : []), ...task.grants!];
      expect({ module: task.module, sids: allows.map((s) => s.Sid) }).toEqual({
        module: task.module,
        sids: expected,
      });
      const describe = allows.find((s) => s.Sid === 'Describe');
      expect(describe ? actionsOf(describe).sort() : []).toEqual([...task.describes!].sort());
    }
  });

  test('a role gets the Denies that guard what its grants could change, and only those', () => {
    const byModule = taskRoleStatementsByModule<Statement>(template);
    const denies = (module: string) =>
      byModule[module]
        .filter((s) => s.Effect === 'Deny')
        .map((s) => s.Sid)
        .sort();
    const delivered = [
      'NeverDeleteDeliveredOutputs',
      'NeverUntagDeliveredOutputs',
      'TheDeliveredTagIsOnlyEverTrue',
    ];
    expect(denies('teardown')).toEqual(delivered);
    expect(denies('check_snapshots')).toEqual(delivered); // it tags delivered
    expect(denies('register_image')).toEqual([...delivered, 'NeverMakeSnapshotsPublic'].sort());
    expect(denies('check_instance')).toEqual([]);
    expect(denies('summarize_batch')).toEqual([]);
    expectDeliveredOutputDenies(byModule.teardown);
  });

  test('a function that describes nothing has no statement on every resource', () => {
    const byModule = taskRoleStatementsByModule<Statement>(template);
    for (const module of [
      'launch',
      'list_source_blocks',
      'enable_fast_snapshot_restore',
      'summarize_batch',
    ]) {
      expect({ module, unscoped: byModule[module].filter((s) => s.Resource === '*') }).toEqual({
        module,
        unscoped: [],
      });
    }
    // the launch role alone may run instances and pass the instance role; only teardown may delete
    const having = (action: string) =>
      Object.entries(byModule)
        .filter(([, statements]) =>
          statements.some((s) => s.Effect !== 'Deny' && actionsOf(s).includes(action)),
        )
        .map(([module]) => module)
        .sort();
    expect(having('ec2:RunInstances')).toEqual(['launch']);
    expect(having('iam:PassRole')).toEqual(['launch']);
    expect(having('ec2:DeleteSnapshot')).toEqual(['teardown']);
    expect(having('ssm:SendCommand')).toEqual(['start_compaction']);
  });

  test("each task role writes only its own function's log group", () => {
    const functions = compactorFunctions(template);
    for (const [logicalId, fn] of Object.entries(functions).filter(([, f]) => isWorkflowFunction(f))) {
      const roleId = fn.Properties.Role['Fn::GetAtt'][0] as string;
      const logs = attachedPolicyStatements(template, roleId).filter((st) => st.Sid === 'WriteOwnLogs');
      expect({ logicalId, resources: logs.map((st) => st.Resource) }).toEqual({
        logicalId,
        resources: [{ 'Fn::GetAtt': [fn.Properties.LoggingConfig.LogGroup.Ref, 'Arn'] }],
      });
    }
  });

  test('grants no code path uses are gone', () => {
    const all = taskStatements.flatMap(actionsOf);
    for (const unused of [
      'ec2:DetachVolume',
      'ec2:DisableFastSnapshotRestores',
      // the block lists are metadata, and the instance writes the direct snapshots (start_compaction only
      // starts them): the task role reads and writes no snapshot data through the EBS direct APIs
      'ebs:GetSnapshotBlock',
      'ebs:ListChangedBlocks',
      'ebs:PutSnapshotBlock',
      'ebs:CompleteSnapshot',
      's3:ListAllMyBuckets',
      's3:PutBucketPolicy',
      's3:DeleteBucket',
      // check_compaction reads its progress with logs:GetLogEvents on the command's stream only
      'logs:FilterLogEvents',
      'logs:DescribeLogStreams',
      'ssm:ListCommandInvocations',
      'ec2:DescribeInstanceTypes',
      'ec2:DescribeTags',
    ]) {
      expect(all).not.toContain(unused);
    }
  });

  test('block lists: ebs:ListSnapshotBlocks on any snapshot, the keys only through EBS, S3 only in the stack bucket', () => {
    const bucketId = Object.keys(template.findResources('AWS::S3::Bucket')).find((id) =>
      id.startsWith('SourceBlocksBucket'),
    )!;
    // the EBS direct APIs granted: metadata, never data, and starting the direct snapshots (tests of that:
    // test/cdk/direct-snapshots.test.ts)
    const ebs = taskStatements.filter((s) => actionsOf(s).some((a) => a.startsWith('ebs:')));
    expect(ebs.map(actionsOf).sort()).toEqual([['ebs:ListSnapshotBlocks'], ['ebs:StartSnapshot']]);
    ebs.sort((a, b) => actionsOf(a)[0].localeCompare(actionsOf(b)[0]));
    // snapshots shared by other accounts too: no account in the ARN
    expect(JSON.stringify(ebs[0].Resource)).toMatch(/":ec2:",\{"Ref":"AWS::Region"\},"::snapshot\/\*"\]/);
    expect(ebs[0].Condition).toBeUndefined();
    // a key may be used only through EC2 or (to list an encrypted snapshot) through EBS, where only Decrypt
    const kms = taskStatements.filter((s) =>
      actionsOf(s).some((a) => a.startsWith('kms:') && a !== 'kms:DescribeKey'),
    );
    const via = (service: string) => ({
      StringEquals: {
        'kms:ViaService': {
          'Fn::Join': ['', [`${service}.`, { Ref: 'AWS::Region' }, '.', { Ref: 'AWS::URLSuffix' }]],
        },
      },
    });
    const viaEbsDirect = {
      StringEquals: {
        'kms:ViaService': [
          via('ec2').StringEquals['kms:ViaService'],
          via('ebs').StringEquals['kms:ViaService'],
          via('ebs-fips').StringEquals['kms:ViaService'],
        ],
      },
    };
    const kmsOrder = [
      'UseKeysOnlyThroughEc2',
      'StartEncryptedDirectSnapshotsThroughEbs',
      'ReadEncryptedSnapshotsThroughEbs',
    ];
    kms.sort((a, b) => kmsOrder.indexOf(a.Sid!) - kmsOrder.indexOf(b.Sid!));
    expect(kms.map((s) => s.Sid)).toEqual(kmsOrder);
    expect(kms.map((s) => s.Condition)).toEqual([via('ec2'), viaEbsDirect, via('ebs')]);
    expect(actionsOf(kms[2])).toEqual(['kms:Decrypt']);
    expect(kms[2].Resource).toEqual(kms[0].Resource);
    expect(kms[1].Resource).toEqual(kms[0].Resource);
    // objects of the stack's bucket (any key: execution names are not known before), listing that bucket
    // (the batch results bucket's statements: test/cdk/batch-workflow.test.ts)
    const s3 = taskStatements.filter(
      (s) =>
        actionsOf(s).some((a) => a.startsWith('s3:')) && !JSON.stringify(s.Resource).includes('BatchResults'),
    );
    // and the one object of the data-plane program, whose GET start_compaction presigns for the instance
    const programKey = workflowEnvironmentValues(template).PROGRAM_KEY;
    expect(programKey).toMatch(/^[0-9a-f]{64}\.pyz$/);
    const objects = { 'Fn::Join': ['', [{ 'Fn::GetAtt': [bucketId, 'Arn'] }, '/*']] };
    s3.sort((a, b) => a.Sid!.localeCompare(b.Sid!));
    expect(s3.map((s) => [s.Sid, actionsOf(s).sort(), s.Resource, s.Condition])).toEqual([
      ['DeleteAnExecutionsBlockLists', ['s3:DeleteObject'], objects, undefined],
      ['FindAnExecutionsBlockLists', ['s3:ListBucket'], { 'Fn::GetAtt': [bucketId, 'Arn'] }, undefined],
      [
        'KeepTheBlockListsInTheStacksBucket',
        ['s3:DeleteObject', 's3:GetObject', 's3:PutObject'],
        objects,
        undefined,
      ],
      ['SignTheInstancesGetOfTheBlockLists', ['s3:GetObject'], objects, undefined],
      [
        'SignTheInstancesGetOfTheProgram',
        ['s3:GetObject'],
        {
          'Fn::Join': [
            '',
            [
              'arn:',
              { Ref: 'AWS::Partition' },
              ':s3:::',
              { 'Fn::Sub': 'cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}' },
              `/${programKey}`,
            ],
          ],
        },
        undefined,
      ],
    ]);
  });

  test('the block-list bucket: SSE-S3, no public access, TLS only, expires past the longest execution, goes with the stack', () => {
    // the other bucket is the batch results' (test/cdk/batch-workflow.test.ts)
    const buckets = Object.entries(template.findResources('AWS::S3::Bucket'));
    expect(buckets.map(([id]) => id.replace(/[0-9A-F]{8}$/, '')).sort()).toEqual([
      'BatchResultsBucket',
      'SourceBlocksBucket',
    ]);
    const [id, bucket] = buckets.find(([bucketId]) => bucketId.startsWith('SourceBlocksBucket'))!;
    expect(bucket.DeletionPolicy).toBe('Delete');
    expect(bucket.Properties).toMatchObject({
      BucketEncryption: {
        ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }],
      },
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
      OwnershipControls: { Rules: [{ ObjectOwnership: 'BucketOwnerEnforced' }] },
      // stateMachineTimeoutMinutes 2880 = 2 days, and a day more: what a lost execution left goes
      LifecycleConfiguration: {
        Rules: [
          {
            Status: 'Enabled',
            ExpirationInDays: 3,
            AbortIncompleteMultipartUpload: { DaysAfterInitiation: 1 },
          },
        ],
      },
    });
    expect(bucket.Properties.VersioningConfiguration).toBeUndefined();
    const policies = Object.values(template.findResources('AWS::S3::BucketPolicy')).filter(
      (p) => p.Properties.Bucket.Ref === id,
    );
    expect(policies).toHaveLength(1);
    expect(policies[0].Properties.PolicyDocument.Statement).toContainEqual(
      expect.objectContaining({
        Effect: 'Deny',
        Action: 's3:*',
        Principal: { AWS: '*' },
        Condition: { Bool: { 'aws:SecureTransport': 'false' } },
      }),
    );
    // emptied when the stack is deleted, so the bucket can go
    template.hasResourceProperties('Custom::S3AutoDeleteObjects', { BucketName: { Ref: id } });
  });

  test('the transfer instance has no S3 permission (presigned URLs); EBS direct writes and KMS only for the direct snapshots', () => {
    const [role] = Object.entries(template.findResources('AWS::IAM::Role')).filter(([, r]) =>
      String(r.Properties.Description).includes('transfer instance'),
    );
    const statements: Statement[] = [
      ...(role[1].Properties.Policies ?? []).flatMap(
        (policy: { PolicyDocument: { Statement: Statement[] } }) => policy.PolicyDocument.Statement,
      ),
      ...attachedPolicyStatements(template, role[0]),
    ];
    expect(statements.length).toBeGreaterThan(0);
    const actions = statements.flatMap(actionsOf);
    expect(actions.filter((a) => /^s3:/.test(a) || a === '*')).toEqual([]);
    // the statements themselves: test/cdk/direct-snapshots.test.ts
    expect(
      statements.filter((s) => actionsOf(s).some((a) => /^(ebs|kms):/.test(a))).map((s) => s.Sid),
    ).toEqual(['WriteOnlyTheDirectSnapshotsThisInstanceWrites', 'WriteEncryptedDirectSnapshotsThroughEbs']);
  });

  test('CreateTags: while creating, the tags of a direct snapshot, or only the delivered tag on the stack snapshots', () => {
    const order = [
      'TagOnlyWhileCreating',
      'MarkTheStacksSnapshotsDelivered',
      'TagDirectSnapshotsWhileStarting',
    ];
    const tagging = statementsWith(taskStatements, 'ec2:CreateTags')
      .filter((s) => s.Effect !== 'Deny')
      .sort((a, b) => order.indexOf(a.Sid!) - order.indexOf(b.Sid!));
    expect(tagging.map((s) => s.Sid)).toEqual(order);
    expect(tagging[0].Condition).toEqual({
      StringEquals: {
        'ec2:CreateAction': ['RunInstances', 'CreateVolume', 'CreateSnapshot', 'RegisterImage'],
      },
    });
    expect(JSON.stringify(tagging[1].Resource)).toMatch(/::snapshot\/\*/);
    expect(tagging[1].Condition).toEqual({
      StringEquals: {
        [`aws:ResourceTag/${STACK_TAG}`]: 'EbsSnapshotCompactor',
        'aws:RequestTag/ebs-snapshot-compactor:delivered': 'true',
      },
      'ForAllValues:StringEquals': { 'aws:TagKeys': ['ebs-snapshot-compactor:delivered'] },
    });
  });
  test('a delivered output may not be deleted, deregistered, untagged or re-tagged (explicit Denies)', () => {
    expectDeliveredOutputDenies(taskStatements);
    // the transfer instance's role cannot do any of it in the first place
    const instanceRoleIds = Object.keys(template.findResources('AWS::IAM::Role')).filter((id) =>
      id.startsWith('TransferInstanceRole'),
    );
    expect(instanceRoleIds).toHaveLength(1);
    const instanceActions = Object.values(template.findResources('AWS::IAM::Policy'))
      .filter((p) => JSON.stringify(p.Properties.Roles).includes(instanceRoleIds[0]))
      .flatMap((p) => p.Properties.PolicyDocument.Statement as Statement[])
      .flatMap(actionsOf);
    expect(instanceActions.length).toBeGreaterThan(0);
    for (const action of ['ec2:DeleteSnapshot', 'ec2:DeregisterImage', 'ec2:DeleteTags', 'ec2:CreateTags']) {
      expect(instanceActions).not.toContain(action);
    }
    expect(instanceActions.filter((a) => a === '*' || a === 'ec2:*')).toEqual([]);
  });

  test('iam:PassRole only for the instance role, only to EC2', () => {
    const passRole = statementsWith(taskStatements, 'iam:PassRole');
    expect(passRole).toHaveLength(1);
    expect(passRole[0].Resource).toEqual({
      'Fn::GetAtt': [expect.stringMatching(/^TransferInstanceRole/), 'Arn'],
    });
    expect(passRole[0].Condition).toEqual({ StringEquals: { 'iam:PassedToService': 'ec2.amazonaws.com' } });
  });

  test('iam:CreateServiceLinkedRole only for the EC2 Spot role (first Spot launch of an account)', () => {
    const create = statementsWith(taskStatements, 'iam:CreateServiceLinkedRole');
    expect(create).toHaveLength(1);
    expect(actionsOf(create[0])).toEqual(['iam:CreateServiceLinkedRole']);
    expect(JSON.stringify(create[0].Resource)).toMatch(
      /:iam::",\{"Ref":"AWS::AccountId"\},":role\/aws-service-role\/spot\.amazonaws\.com\/AWSServiceRoleForEC2Spot"/,
    );
    expect(create[0].Condition).toEqual({ StringEquals: { 'iam:AWSServiceName': 'spot.amazonaws.com' } });
  });

  test('ssm:SendCommand only with the stack document and on instances tagged with the stack', () => {
    const send = statementsWith(taskStatements, 'ssm:SendCommand');
    expect(send).toHaveLength(2);
    const onDocument = send.find((s) => JSON.stringify(s.Resource).includes(':document/'));
    expect(JSON.stringify(onDocument?.Resource)).toMatch(/CompactVolumesDocument/);
    expect(onDocument?.Condition).toBeUndefined();
    const onInstances = send.find((s) => JSON.stringify(s.Resource).includes(':instance/'));
    expect(onInstances?.Condition).toEqual({
      StringEquals: { [`ssm:resourceTag/${STACK_TAG}`]: 'EbsSnapshotCompactor' },
    });
  });

  test('KMS use only through EC2 (and EBS for the direct snapshots); by default any key of this account and Region', () => {
    const kms = statementsWith(taskStatements, 'kms:CreateGrant');
    expect(kms.map((s) => s.Sid)).toEqual([
      'UseKeysOnlyThroughEc2',
      'StartEncryptedDirectSnapshotsThroughEbs',
    ]);
    expect(kms[0].Condition).toEqual({
      StringEquals: {
        'kms:ViaService': {
          'Fn::Join': ['', ['ec2.', { Ref: 'AWS::Region' }, '.', { Ref: 'AWS::URLSuffix' }]],
        },
      },
    });
    expect(JSON.stringify(kms[0].Resource)).toMatch(/:kms:.*:key\/\*/);
  });

  test('events:PutEvents only on the default bus', () => {
    const put = statementsWith(taskStatements, 'events:PutEvents');
    expect(put).toHaveLength(1);
    expect(JSON.stringify(put[0].Resource)).toMatch(/:event-bus\/default"/);
  });

  test('no task statement allows a mutating EC2 action on every resource without a condition', () => {
    for (const statement of taskStatements) {
      const mutating = actionsOf(statement).filter((a) => /^ec2:(?!Describe|Get)/.test(a));
      if (mutating.length > 0 && statement.Resource === '*') {
        throw new Error(`unscoped EC2 actions ${mutating.join(', ')}`);
      }
    }
  });

  test('transfer instance role: no managed policy, Command output only to the command log group', () => {
    const [role] = Object.values(template.findResources('AWS::IAM::Role')).filter((r) =>
      String(r.Properties.Description).includes('transfer instance'),
    );
    expect(role.Properties.ManagedPolicyArns).toBeUndefined();
    const policies = Object.values(template.findResources('AWS::IAM::Policy')).filter((p) =>
      JSON.stringify(p.Properties.Roles).includes('TransferInstanceRole'),
    );
    const statements: Statement[] = policies.flatMap((p) => p.Properties.PolicyDocument.Statement);
    const writes = statementsWith(statements, 'logs:PutLogEvents');
    expect(writes).toHaveLength(1);
    expect(writes[0].Resource).toEqual({ 'Fn::GetAtt': [expect.stringMatching(/^CommandLogs/), 'Arn'] });
  });

  test('launch template: AL2023 from SSM, IMDSv2 only with hop limit 1, encrypted root, no key pair, no user data', () => {
    const templates = Object.values(template.findResources('AWS::EC2::LaunchTemplate'));
    expect(templates).toHaveLength(1);
    const data = templates[0].Properties.LaunchTemplateData;
    expect(data.ImageId).toBe(
      'resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64',
    );
    expect(data.MetadataOptions).toEqual({
      HttpEndpoint: 'enabled',
      HttpTokens: 'required',
      HttpPutResponseHopLimit: 1,
    });
    expect(data.BlockDeviceMappings).toEqual([
      {
        DeviceName: '/dev/xvda',
        Ebs: { DeleteOnTermination: true, Encrypted: true, VolumeSize: 8, VolumeType: 'gp3' },
      },
    ]);
    expect(data.KeyName).toBeUndefined();
    expect(data.UserData).toBeUndefined();
    expect(data.IamInstanceProfile).toBeDefined();
  });

  test('the task environment names the launch template root device and size (launch maps the root itself)', () => {
    const [launchTemplate] = Object.values(template.findResources('AWS::EC2::LaunchTemplate'));
    const [root] = launchTemplate.Properties.LaunchTemplateData.BlockDeviceMappings;
    const variables = workflowEnvironmentValues(template);
    expect(variables.ROOT_DEVICE_NAME).toBe(root.DeviceName);
    expect(variables.ROOT_VOLUME_GIB).toBe(String(root.Ebs.VolumeSize));
  });

  test('transfer instance security group: no inbound rule, HTTPS out only to the endpoints and the S3 prefix list', () => {
    const groups = Object.entries(template.findResources('AWS::EC2::SecurityGroup')).filter(([, g]) =>
      String(g.Properties.GroupDescription).startsWith('ebs-snapshot-compactor transfer instances'),
    );
    expect(groups).toHaveLength(1);
    const [id, group] = groups[0];
    expect(group.Properties.SecurityGroupIngress).toBeUndefined();
    // no CIDR egress at all (CDK puts a "disallow all" placeholder rule on the group itself)
    expect(JSON.stringify(group.Properties.SecurityGroupEgress ?? [])).not.toMatch(/0\.0\.0\.0\/0/);
    const egress = Object.values(template.findResources('AWS::EC2::SecurityGroupEgress'))
      .map((e) => e.Properties)
      .filter((p) => JSON.stringify(p.GroupId).includes(id));
    expect(egress).toHaveLength(2);
    for (const rule of egress) {
      expect(rule).toMatchObject({ IpProtocol: 'tcp', FromPort: 443, ToPort: 443 });
      expect(rule.CidrIp).toBeUndefined();
    }
    expect(JSON.stringify(egress)).toMatch(/DestinationSecurityGroupId.*EndpointSecurityGroup/);
    expect(JSON.stringify(egress)).toMatch(
      /DestinationPrefixListId.*S3PrefixListLookup.*PrefixLists\.0\.PrefixListId/,
    );
    const endpoints = Object.values(template.findResources('AWS::EC2::VPCEndpoint')).filter(
      (e) => e.Properties.VpcEndpointType === 'Interface',
    );
    expect(endpoints).toHaveLength(5);
    for (const endpoint of endpoints) {
      expect(JSON.stringify(endpoint.Properties.SecurityGroupIds)).toMatch(/EndpointSecurityGroup/);
    }
  });

  test('created VPC: two private isolated subnets, no NAT, SSM/Logs/EBS interface endpoints and an S3 gateway', () => {
    template.resourceCountIs('AWS::EC2::VPC', 1);
    template.resourceCountIs('AWS::EC2::Subnet', 2);
    template.resourceCountIs('AWS::EC2::NatGateway', 0);
    template.resourceCountIs('AWS::EC2::InternetGateway', 0);
    const endpoints = Object.values(template.findResources('AWS::EC2::VPCEndpoint'));
    const services = endpoints.map((e) => JSON.stringify(e.Properties.ServiceName));
    for (const service of ['.ssm"', '.ssmmessages"', '.ec2messages"', '.logs"', '.ebs"', '.s3"']) {
      expect(services.filter((s) => s.includes(service))).toHaveLength(1);
    }
    expect(
      endpoints.find((e) => JSON.stringify(e.Properties.ServiceName).includes('.s3"'))?.Properties
        .VpcEndpointType,
    ).toBe('Gateway');
  });

  test('the Command document pins the program (its SHA-256), which ships as a file asset', () => {
    const documents = Object.values(template.findResources('AWS::SSM::Document'));
    expect(documents).toHaveLength(1);
    expect(documents[0].Properties.DocumentType).toBe('Command');
    const content = documents[0].Properties.Content;
    expect(content.schemaVersion).toBe('2.2');
    const script = content.mainSteps[0].inputs.runCommand.join('\n');
    expect(script).not.toContain('__SPARSECOPY_PYZ_SHA256__');
    expect(script).toContain(`echo '${programSha256(programArchive())}  '`);
    expect(script).not.toMatch(/^UEsDB/m); // no base64 zip ("PK\x03\x04") any more
  });

  test('log groups have a retention; the state machine logs ALL with execution data and traces', () => {
    template.allResourcesProperties('AWS::Logs::LogGroup', { RetentionInDays: 90 });
    // The compaction workflow, its launch attempt, the cleanup and the batch.
    template.resourceCountIs('AWS::StepFunctions::StateMachine', 4);
    template.allResourcesProperties('AWS::StepFunctions::StateMachine', {
      StateMachineType: 'STANDARD',
      TracingConfiguration: { Enabled: true },
      LoggingConfiguration: { Level: 'ALL', IncludeExecutionData: true },
    });
  });

  test('tag trigger: tag change on an EC2 snapshot with the trigger key, never on workflow outputs', () => {
    template.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: {
        source: ['aws.tag'],
        'detail-type': ['Tag Change on Resource'],
        detail: {
          service: ['ec2'],
          'resource-type': ['snapshot'],
          'changed-tag-keys': ['compact'],
          tags: {
            compact: [{ exists: true }],
            'ebs-snapshot-compactor:source-snapshot': [{ exists: false }],
          },
        },
      },
      Targets: [
        Match.objectLike({
          Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^TriggersStartFromTag'), 'Arn'] },
          DeadLetterConfig: {
            Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^TriggersDeadLetters'), 'Arn'] },
          },
          RetryPolicy: { MaximumRetryAttempts: 8, MaximumEventAgeInSeconds: 7200 },
        }),
      ],
    });
    // The whole event goes to start_from_tag (it names the execution after the snapshot and the tag value).
    const tagRule = Object.values(template.findResources('AWS::Events::Rule')).find(
      (rule) => rule.Properties.EventPattern.source[0] === 'aws.tag',
    )!;
    expect(tagRule.Properties.Targets).toHaveLength(1);
    const target = tagRule.Properties.Targets[0];
    expect([target.Input, target.InputPath, target.InputTransformer]).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    template.hasResourceProperties('AWS::Lambda::Permission', {
      Action: 'lambda:InvokeFunction',
      Principal: 'events.amazonaws.com',
      FunctionName: { 'Fn::GetAtt': [Match.stringLikeRegexp('^TriggersStartFromTag'), 'Arn'] },
    });
  });

  test('start_from_tag has its own role: start the main state machine, describe its executions, write its logs', () => {
    const statements = [
      ...roleStatements(template, 'ebs-snapshot-compactor tag trigger'),
      ...attachedPolicyStatements(template, 'TriggersStartFromTagRole'),
    ];
    const byAction = Object.fromEntries(
      statements.map((st) => [actionsOf(st).sort().join(','), st.Resource]),
    );
    expect(Object.keys(byAction).sort()).toEqual(
      [
        'logs:CreateLogStream,logs:PutLogEvents',
        'sqs:GetQueueAttributes,sqs:GetQueueUrl,sqs:SendMessage',
        'states:DescribeExecution',
        'states:StartExecution',
        'xray:PutTelemetryRecords,xray:PutTraceSegments',
      ].sort(),
    );
    expect(byAction['sqs:GetQueueAttributes,sqs:GetQueueUrl,sqs:SendMessage']).toEqual({
      'Fn::GetAtt': [expect.stringMatching(/^TriggersDeadLetters/), 'Arn'],
    });
    expect(byAction['states:StartExecution']).toEqual({
      Ref: expect.stringMatching(/^WorkflowStateMachine/),
    });
    expect(JSON.stringify(byAction['states:DescribeExecution'])).toMatch(
      /:execution:.*WorkflowStateMachine.*Name.*:\*/,
    );
    expect(JSON.stringify(byAction['logs:CreateLogStream,logs:PutLogEvents'])).toMatch(
      /TriggersStartFromTagLogs/,
    );
    const fn = Object.values(compactorFunctions(template)).find(
      (f) => f.Properties.Handler === 'compactor.handlers.start_from_tag.handler',
    )!;
    expect(fn.Properties.Role).toEqual({
      'Fn::GetAtt': [expect.stringMatching(/^TriggersStartFromTagRole/), 'Arn'],
    });
  });

  test('an event start_from_tag fails on is kept: Lambda retries it twice, then sends it to the dead-letter queue', () => {
    // The rule's dead-letter queue gets only what EventBridge could not deliver; a function error is Lambda's.
    template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      FunctionName: { Ref: Match.stringLikeRegexp('^TriggersStartFromTag') },
      MaximumRetryAttempts: 2,
      MaximumEventAgeInSeconds: 21600,
      DestinationConfig: {
        OnFailure: { Destination: { 'Fn::GetAtt': [Match.stringLikeRegexp('^TriggersDeadLetters'), 'Arn'] } },
      },
    });
  });

  test('failed, timed-out or aborted executions start the cleanup state machine', () => {
    template.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: {
        source: ['aws.states'],
        'detail-type': ['Step Functions Execution Status Change'],
        detail: {
          stateMachineArn: [{ Ref: Match.stringLikeRegexp('^WorkflowStateMachine') }],
          status: ['FAILED', 'TIMED_OUT', 'ABORTED'],
        },
      },
      Targets: [
        Match.objectLike({
          Arn: { Ref: Match.stringLikeRegexp('^CleanupStateMachine') },
          RoleArn: { 'Fn::GetAtt': [Match.anyValue(), 'Arn'] },
          InputTransformer: {
            InputPathsMap: {
              'detail-name': '$.detail.name',
              'detail-executionArn': '$.detail.executionArn',
              'detail-status': '$.detail.status',
            },
            InputTemplate:
              '{"executionName":<detail-name>,"executionArn":<detail-executionArn>,"status":<detail-status>}',
          },
          DeadLetterConfig: {
            Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^TriggersDeadLetters'), 'Arn'] },
          },
          RetryPolicy: { MaximumRetryAttempts: 8, MaximumEventAgeInSeconds: 7200 },
        }),
      ],
    });
    // EventBridge may only start the cleanup state machine.
    const eventRoles = Object.values(template.findResources('AWS::IAM::Policy')).filter((policy) =>
      JSON.stringify(policy.Properties.PolicyDocument).includes('CleanupStateMachine'),
    );
    const starts = eventRoles.flatMap((policy) => policy.Properties.PolicyDocument.Statement as Statement[]);
    expect(statementsWith(starts, 'states:StartExecution')).toEqual([
      expect.objectContaining({ Resource: { Ref: expect.stringMatching(/^CleanupStateMachine/) } }),
    ]);
  });

  test('outputs: exported state machine ARN, SSM parameter with it, pipeline policy', () => {
    template.hasOutput('StateMachineArn', {
      Value: { Ref: Match.stringLikeRegexp('^WorkflowStateMachine') },
      Export: { Name: 'EbsSnapshotCompactor-StateMachineArn' },
    });
    template.hasResourceProperties('AWS::SSM::Parameter', {
      Name: '/ebs-snapshot-compactor/EbsSnapshotCompactor/state-machine-arn',
      Value: { Ref: Match.stringLikeRegexp('^WorkflowStateMachine') },
    });
    const policies = Object.values(template.findResources('AWS::IAM::ManagedPolicy'));
    expect(policies).toHaveLength(1);
    const statements: Statement[] = policies[0].Properties.PolicyDocument.Statement;
    expect(statementsWith(statements, 'states:StartExecution')[0].Resource).toEqual({
      Ref: expect.stringMatching(/^WorkflowStateMachine/),
    });
    const watch = statementsWith(statements, 'states:DescribeExecution')[0];
    expect(actionsOf(watch)).toEqual(expect.arrayContaining(['states:StopExecution']));
    expect(JSON.stringify(watch.Resource)).toMatch(/:execution:.*WorkflowStateMachine.*Name.*:\*/);
    // a launch attempt is a child execution: the client reads its history, and may not stop it
    const follow = statements.find((s) => s.Sid === 'FollowLaunchAttempts');
    expect(follow && actionsOf(follow).sort()).toEqual([
      'states:DescribeExecution',
      'states:GetExecutionHistory',
    ]);
    expect(JSON.stringify(follow?.Resource)).toMatch(/:execution:.*AttemptStateMachine.*Name.*:\*/);
    expect(JSON.stringify(statementsWith(statements, 'ssm:GetParameter')[0].Resource)).toMatch(
      /StateMachineArnParameter/,
    );
  });
});

describe('settings change the stack', () => {
  test('given VPC and subnets: no VPC created, the subnets go to the Lambdas and the IAM scope', () => {
    const template = synthTemplate({
      vpcId: 'vpc-0123456789abcdef0',
      subnetIds: 'subnet-0123456789abcdef0,subnet-0fedcba9876543210',
    });
    template.resourceCountIs('AWS::EC2::VPC', 0);
    template.resourceCountIs('AWS::EC2::VPCEndpoint', 0);
    expect(workflowEnvironmentValues(template)).toMatchObject({
      SUBNET_IDS: 'subnet-0123456789abcdef0,subnet-0fedcba9876543210',
    });
    template.hasResourceProperties('AWS::EC2::SecurityGroup', { VpcId: 'vpc-0123456789abcdef0' });
    expect(JSON.stringify(template.toJSON())).toMatch(/:subnet\/subnet-0fedcba9876543210/);
  });

  test('arm64 uses the arm64 AMI parameter and tells prepare the architecture', () => {
    const template = synthTemplate({ architecture: 'arm64' });
    template.hasResourceProperties('AWS::EC2::LaunchTemplate', {
      LaunchTemplateData: Match.objectLike({
        ImageId: 'resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64',
      }),
    });
    expect(workflowEnvironmentValues(template)).toMatchObject({ INSTANCE_TYPES: '', ARCHITECTURE: 'arm64' });
  });

  test('stack name, trigger key, listed KMS keys, layer override and retention are applied', () => {
    const key = 'arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab';
    const layer =
      'arn:aws:lambda:eu-west-1:017000801446:layer:AWSLambdaPowertoolsPythonV3-python313-x86_64:7';
    const template = synthTemplate({
      stackName: 'Compactor2',
      triggerTagKey: 'shrink-me',
      kmsKeyArns: key,
      powertoolsLayerArn: layer,
      logRetentionDays: '30',
      allowOnDemand: 'false',
      instanceTypes: 'm7i.2xlarge,c7i.2xlarge',
      stateMachineTimeoutMinutes: 1440,
      compactionPollSeconds: 300,
    });
    template.hasOutput('StateMachineArn', { Export: { Name: 'Compactor2-StateMachineArn' } });
    template.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: Match.objectLike({ detail: Match.objectLike({ 'changed-tag-keys': ['shrink-me'] }) }),
    });
    workflowFunctionsTemplate(template).allResourcesProperties('AWS::Lambda::Function', { Layers: [layer] });
    expect(workflowEnvironmentValues(template)).toMatchObject({
      STACK_NAME: 'Compactor2',
      TRIGGER_TAG_KEY: 'shrink-me',
      ALLOW_ON_DEMAND: 'false',
      INSTANCE_TYPES: 'm7i.2xlarge,c7i.2xlarge',
      STATE_MACHINE_TIMEOUT_MINUTES: '1440',
      COMPACTION_POLL_SECONDS: '300',
    });
    template.allResourcesProperties('AWS::Logs::LogGroup', { RetentionInDays: 30 });
    const kms = statementsWith(taskRoleStatements<Statement>(template), 'kms:CreateGrant');
    expect(kms[0].Resource).toBe(key);
    // the listed keys are the only ones EBS may decrypt with to list an encrypted snapshot's blocks
    const ebsKms = statementsWith(taskRoleStatements<Statement>(template), 'kms:Decrypt').filter((s) =>
      JSON.stringify(s.Condition).includes('ebs.'),
    );
    expect(ebsKms.map((s) => s.Resource)).toEqual([key, key]);
    // ... and the keys the instance may use for the direct snapshots
    const instanceKms = Object.values(template.findResources('AWS::IAM::Policy'))
      .filter((p) => JSON.stringify(p.Properties.Roles).includes('TransferInstanceRole'))
      .flatMap((p) => p.Properties.PolicyDocument.Statement as Statement[])
      .filter((st) => actionsOf(st).some((a) => a.startsWith('kms:')));
    expect(instanceKms.map((st) => st.Resource)).toEqual([key]);
    // a one-day execution: its block lists expire after two days
    template.hasResourceProperties('AWS::S3::Bucket', {
      LifecycleConfiguration: { Rules: [Match.objectLike({ ExpirationInDays: 2 })] },
    });
    const conditions = JSON.stringify(taskRoleStatements<Statement>(template));
    expect(conditions).toContain('"Compactor2"');
    expect(conditions).not.toContain('"EbsSnapshotCompactor"');
  });
});

describe('task roles from contract/tasks.json', () => {
  const build = (tasks: { module: string; grants: string[]; describes: string[] }[]) => {
    const stack = new Stack(new App(), 'Roles');
    const bucket = new s3.Bucket(stack, 'Bucket');
    return () =>
      new TaskRoles(stack, 'TaskRoles', {
        tasks,
        stackName: 'Roles',
        subnetIds: ['subnet-0123456789abcdef0'],
        securityGroupId: 'sg-0123456789abcdef0',
        launchTemplateId: 'lt-0123456789abcdef0',
        amiParameterName: '/aws/service/ami',
        instanceRole: new iam.Role(stack, 'Instance', {
          assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com'),
        }),
        documentName: 'Document',
        programObjectArn: 'arn:aws:s3:::bucket/program.pyz',
        commandLogGroupArn: 'arn:aws:logs:us-east-1:111122223333:log-group:commands:*',
        kmsKeyArns: ['arn:aws:kms:us-east-1:111122223333:key/abcd'],
        sourceBlocksBucket: bucket,
        batchResultsBucket: bucket,
        batchStateMachineName: 'Roles-Batch',
      });
  };
  const contract = CONTRACT_TASKS.filter((t) => t.workflow).map((t) => ({
    module: t.module,
    grants: [...t.grants!],
    describes: [...t.describes!],
  }));

  test("the contract's grants build", () => {
    expect(Object.keys(build(contract)().roles)).toHaveLength(contract.length);
  });

  test('a grant lib/task-role.ts does not define fails the synth, naming it', () => {
    const typo = contract.map((t) =>
      t.module === 'launch' ? { ...t, grants: [...t.grants, 'RunAnything'] } : t,
    );
    expect(build(typo)).toThrow(/grants launch RunAnything, which lib\/task-role.ts does not define/);
  });

  test('a statement no task grants fails the synth, naming it', () => {
    const without = contract.map((t) => ({ ...t, grants: t.grants.filter((g) => g !== 'RunSpotInstances') }));
    expect(build(without)).toThrow(/defines RunSpotInstances, which no task of contract\/tasks.json grants/);
  });
});
