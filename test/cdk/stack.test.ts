import { Match, Template } from 'aws-cdk-lib/assertions';
import { TASK_MODULES } from '../../lib/task-functions';
import { synthTemplate } from './support';

const STACK_TAG = 'ebs-snapshot-compactor:stack';

type Statement = {
  Sid?: string;
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

describe('default stack', () => {
  const template = synthTemplate();
  const taskStatements = roleStatements(template, 'ebs-snapshot-compactor task Lambdas');

  test('one Python 3.13 function per task, handler compactor.handlers.<module>.handler, traced', () => {
    const functions = Object.values(template.findResources('AWS::Lambda::Function'));
    expect(functions.map((fn) => fn.Properties.Handler).sort()).toEqual(
      TASK_MODULES.map((module) => `compactor.handlers.${module}.handler`).sort(),
    );
    for (const fn of functions) {
      expect(fn.Properties.Runtime).toBe('python3.13');
      expect(fn.Properties.TracingConfig).toEqual({ Mode: 'Active' });
      expect(fn.Properties.Layers).toHaveLength(1);
    }
  });

  test('every function gets the environment of the contract', () => {
    const expected = {
      STACK_NAME: 'EbsSnapshotCompactor',
      SUBNET_IDS: Match.anyValue(),
      LAUNCH_TEMPLATE_ID: Match.anyValue(),
      INSTANCE_TYPES: 'm7i.large,m6i.large,c6i.large,m5.large,c5.large',
      ALLOW_ON_DEMAND: 'true',
      SOURCE_VOLUME_IOPS: '16000',
      SOURCE_VOLUME_THROUGHPUT: '1000',
      VOLUME_INITIALIZATION_RATE: '0',
      MAX_VOLUME_GIB: '16384',
      DOCUMENT_NAME: Match.anyValue(),
      COMMAND_LOG_GROUP: Match.anyValue(),
      EVENT_BUS_NAME: 'default',
      TRIGGER_TAG_KEY: 'compact',
      MAX_LAUNCH_ATTEMPTS: '3',
      ROOT_DEVICE_NAME: '/dev/xvda',
      ROOT_VOLUME_GIB: '8',
      POWERTOOLS_SERVICE_NAME: 'ebs-snapshot-compactor',
      POWERTOOLS_METRICS_NAMESPACE: 'EbsSnapshotCompactor',
      LOG_LEVEL: 'INFO',
    };
    const functions = Object.values(template.findResources('AWS::Lambda::Function'));
    for (const fn of functions) {
      expect(Object.keys(fn.Properties.Environment.Variables).sort()).toEqual(Object.keys(expected).sort());
    }
    template.allResourcesProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectEquals(expected) },
    });
  });

  test('the Powertools layer comes from the public SSM parameter, resolved at deploy', () => {
    const parameters = template.toJSON().Parameters as Record<string, { Type: string; Default: string }>;
    const layer = Object.values(parameters).find((p) => p.Default?.startsWith('/aws/service/powertools/'));
    expect(layer).toEqual({
      Type: 'AWS::SSM::Parameter::Value<String>',
      Default: '/aws/service/powertools/python/x86_64/python3.13/latest',
    });
  });

  test('creating instances and volumes requires the stack tag in the request', () => {
    const creates = statementsWith(taskStatements, 'ec2:RunInstances').filter((s) => s.Condition);
    expect(creates).toHaveLength(1);
    expect(actionsOf(creates[0])).toEqual(expect.arrayContaining(['ec2:CreateVolume']));
    expect(creates[0].Condition).toEqual({
      StringEquals: { [`aws:RequestTag/${STACK_TAG}`]: 'EbsSnapshotCompactor' },
    });
    expect(JSON.stringify(creates[0].Resource)).toMatch(/:instance\/\*/);
    expect(JSON.stringify(creates[0].Resource)).toMatch(/:volume\/\*/);
    const createVolume = statementsWith(taskStatements, 'ec2:CreateVolume');
    expect(createVolume.every((s) => s.Condition !== undefined)).toBe(true);
  });

  test('RunInstances without the tag condition reaches only the stack subnets, its SG and its template', () => {
    const unconditioned = statementsWith(taskStatements, 'ec2:RunInstances').filter((s) => !s.Condition);
    expect(unconditioned).toHaveLength(1);
    const resources = JSON.stringify(unconditioned[0].Resource);
    expect(resources).not.toMatch(/:instance\/|:volume\//);
    expect(resources).toMatch(/:spot-instances-request\/\*/);
    expect(resources).toMatch(/security-group\//);
    expect(resources).toMatch(/launch-template\//);
    expect(resources).toMatch(/VpctransferSubnet1/);
  });

  test('terminating and deleting need the stack tag on the resource', () => {
    for (const action of [
      'ec2:TerminateInstances',
      'ec2:DeleteVolume',
      'ec2:DetachVolume',
      'ec2:DeleteSnapshot',
      'ec2:DeregisterImage',
      'ec2:EnableFastSnapshotRestores',
    ]) {
      const statements = statementsWith(taskStatements, action);
      expect(statements.length).toBeGreaterThan(0);
      for (const statement of statements) {
        expect(statement.Condition).toEqual({
          StringEquals: { [`aws:ResourceTag/${STACK_TAG}`]: 'EbsSnapshotCompactor' },
        });
      }
    }
  });

  test('CreateTags only as part of a create call', () => {
    const [tagging] = statementsWith(taskStatements, 'ec2:CreateTags');
    expect(statementsWith(taskStatements, 'ec2:CreateTags')).toHaveLength(1);
    expect(tagging.Condition).toEqual({
      StringEquals: {
        'ec2:CreateAction': ['RunInstances', 'CreateVolume', 'CreateSnapshot', 'RegisterImage'],
      },
    });
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

  test('KMS use only through EC2; by default any key of this account and Region', () => {
    const kms = statementsWith(taskStatements, 'kms:CreateGrant');
    expect(kms).toHaveLength(1);
    expect(kms[0].Condition).toEqual({
      StringEquals: {
        'kms:ViaService': { 'Fn::Join': ['', ['ec2.', { Ref: 'AWS::Region' }, '.amazonaws.com']] },
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

  test('transfer instance role: SSM core, Command output only to the command log group', () => {
    template.hasResourceProperties('AWS::IAM::Role', {
      Description: Match.stringLikeRegexp('transfer instance'),
      ManagedPolicyArns: [
        {
          'Fn::Join': [
            '',
            ['arn:', { Ref: 'AWS::Partition' }, ':iam::aws:policy/AmazonSSMManagedInstanceCore'],
          ],
        },
      ],
    });
    const policies = Object.values(template.findResources('AWS::IAM::Policy')).filter((p) =>
      JSON.stringify(p.Properties.Roles).includes('TransferInstanceRole'),
    );
    expect(policies).toHaveLength(1);
    const statements: Statement[] = policies[0].Properties.PolicyDocument.Statement;
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
    const functions = Object.values(template.findResources('AWS::Lambda::Function'));
    expect(functions.length).toBeGreaterThan(0);
    for (const fn of functions) {
      const variables = fn.Properties.Environment.Variables;
      expect(variables.ROOT_DEVICE_NAME).toBe(root.DeviceName);
      expect(variables.ROOT_VOLUME_GIB).toBe(String(root.Ebs.VolumeSize));
    }
  });

  test('transfer instance security group: no inbound rule, only HTTPS out', () => {
    const groups = Object.values(template.findResources('AWS::EC2::SecurityGroup')).filter((g) =>
      String(g.Properties.GroupDescription).startsWith('ebs-snapshot-compactor transfer instances'),
    );
    expect(groups).toHaveLength(1);
    expect(groups[0].Properties.SecurityGroupIngress).toBeUndefined();
    expect(groups[0].Properties.SecurityGroupEgress).toEqual([
      expect.objectContaining({ CidrIp: '0.0.0.0/0', IpProtocol: 'tcp', FromPort: 443, ToPort: 443 }),
    ]);
    const ingress = Object.values(template.findResources('AWS::EC2::SecurityGroupIngress'));
    expect(JSON.stringify(ingress)).not.toMatch(/TransferInstanceSecurityGroup/);
  });

  test('created VPC: two private isolated subnets, no NAT, SSM/Logs interface endpoints and an S3 gateway', () => {
    template.resourceCountIs('AWS::EC2::VPC', 1);
    template.resourceCountIs('AWS::EC2::Subnet', 2);
    template.resourceCountIs('AWS::EC2::NatGateway', 0);
    template.resourceCountIs('AWS::EC2::InternetGateway', 0);
    const endpoints = Object.values(template.findResources('AWS::EC2::VPCEndpoint'));
    const services = endpoints.map((e) => JSON.stringify(e.Properties.ServiceName));
    for (const service of ['.ssm"', '.ssmmessages"', '.ec2messages"', '.logs"', '.s3"']) {
      expect(services.filter((s) => s.includes(service))).toHaveLength(1);
    }
    expect(
      endpoints.find((e) => JSON.stringify(e.Properties.ServiceName).includes('.s3"'))?.Properties
        .VpcEndpointType,
    ).toBe('Gateway');
  });

  test('the Command document is loaded with the program embedded', () => {
    const documents = Object.values(template.findResources('AWS::SSM::Document'));
    expect(documents).toHaveLength(1);
    expect(documents[0].Properties.DocumentType).toBe('Command');
    const content = documents[0].Properties.Content;
    expect(content.schemaVersion).toBe('2.2');
    const script = content.mainSteps[0].inputs.runCommand.join('\n');
    expect(script).not.toContain('__SPARSECOPY_PYZ_BASE64__');
    expect(script).toMatch(/^UEsDB[A-Za-z0-9+/=]+$/m); // base64 of a zip ("PK\x03\x04")
  });

  test('log groups have a retention; the state machine logs ALL with execution data and traces', () => {
    template.allResourcesProperties('AWS::Logs::LogGroup', { RetentionInDays: 90 });
    template.hasResourceProperties('AWS::StepFunctions::StateMachine', {
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
          Arn: { Ref: Match.stringLikeRegexp('^WorkflowStateMachine') },
          InputTransformer: {
            InputPathsMap: { 'resources-0-': '$.resources[0]' },
            InputTemplate: '{"snapshotId":<resources-0->}',
          },
          DeadLetterConfig: {
            Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^TriggersDeadLetters'), 'Arn'] },
          },
          RetryPolicy: { MaximumRetryAttempts: 8, MaximumEventAgeInSeconds: 7200 },
        }),
      ],
    });
  });

  test('timed-out or aborted executions are torn down by the teardown function', () => {
    template.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: Match.objectLike({
        source: ['aws.states'],
        detail: {
          stateMachineArn: [{ Ref: Match.stringLikeRegexp('^WorkflowStateMachine') }],
          status: ['TIMED_OUT', 'ABORTED'],
        },
      }),
      Targets: [
        Match.objectLike({
          Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^TasksTeardown'), 'Arn'] },
          InputTransformer: {
            InputPathsMap: { 'detail-name': '$.detail.name' },
            InputTemplate:
              '{"executionName":<detail-name>,"outcome":"failure","keep":{"snapshotIds":[],"imageId":null}}',
          },
        }),
      ],
    });
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
    template.allResourcesProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({ SUBNET_IDS: 'subnet-0123456789abcdef0,subnet-0fedcba9876543210' }),
      },
    });
    template.hasResourceProperties('AWS::EC2::SecurityGroup', { VpcId: 'vpc-0123456789abcdef0' });
    expect(JSON.stringify(template.toJSON())).toMatch(/:subnet\/subnet-0fedcba9876543210/);
  });

  test('arm64 uses the arm64 AMI parameter and Graviton instance types', () => {
    const template = synthTemplate({ architecture: 'arm64' });
    template.hasResourceProperties('AWS::EC2::LaunchTemplate', {
      LaunchTemplateData: Match.objectLike({
        ImageId: 'resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64',
      }),
    });
    template.allResourcesProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({ INSTANCE_TYPES: 'm7g.large,m6g.large,c7g.large,c6g.large,r6g.large' }),
      },
    });
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
    });
    template.hasOutput('StateMachineArn', { Export: { Name: 'Compactor2-StateMachineArn' } });
    template.hasResourceProperties('AWS::Events::Rule', {
      EventPattern: Match.objectLike({ detail: Match.objectLike({ 'changed-tag-keys': ['shrink-me'] }) }),
    });
    template.allResourcesProperties('AWS::Lambda::Function', {
      Layers: [layer],
      Environment: {
        Variables: Match.objectLike({
          STACK_NAME: 'Compactor2',
          TRIGGER_TAG_KEY: 'shrink-me',
          ALLOW_ON_DEMAND: 'false',
        }),
      },
    });
    template.allResourcesProperties('AWS::Logs::LogGroup', { RetentionInDays: 30 });
    const kms = statementsWith(
      roleStatements(template, 'ebs-snapshot-compactor task Lambdas'),
      'kms:CreateGrant',
    );
    expect(kms[0].Resource).toBe(key);
    const conditions = JSON.stringify(roleStatements(template, 'ebs-snapshot-compactor task Lambdas'));
    expect(conditions).toContain('"Compactor2"');
    expect(conditions).not.toContain('"EbsSnapshotCompactor"');
  });
});
