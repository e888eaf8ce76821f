import * as fs from 'fs';
import * as path from 'path';
import contractLimits from '../../contract/limits.json';
import {
  COMPACTION_POLL_MAX_ATTEMPTS,
  LIMITS,
  SETTINGS,
  EVENTS_OUTSIDE_LOOPS,
  EVENTS_PER_POLL_ITERATION,
  HISTORY_EVENT_LIMIT,
  readSettings,
  Settings,
  SettingsError,
  worstCaseHistoryEvents,
  PARENT_EVENTS_PER_ATTEMPT,
} from '../../lib/settings';
import { POWERTOOLS_LAYER_PARAMETER } from '../../lib/task-functions';

const read = (context: Record<string, unknown>): Settings =>
  readSettings({ tryGetContext: (key) => context[key] });

describe('settings', () => {
  test('defaults', () => {
    const s = read({});
    expect(s).toEqual({
      stackName: 'EbsSnapshotCompactor',
      vpcId: undefined,
      subnetIds: undefined,
      instanceTypes: undefined,
      architecture: 'x86_64',
      allowOnDemand: true,
      sourceVolumeIops: 16000,
      sourceVolumeThroughput: 1000,
      volumeInitializationRate: 0,
      maxVolumeGiB: 16384,
      triggerTagKey: 'compact',
      imageBuilderPipelineArns: undefined,
      imageBuilderCopySharing: true,
      maxLaunchAttempts: 3,
      sourcePoll: { intervalSeconds: 60, maxAttempts: 360 },
      blockListPoll: { intervalSeconds: 10, maxAttempts: 20 },
      readyPoll: { intervalSeconds: 15, maxAttempts: 40 },
      attachPoll: { intervalSeconds: 10, maxAttempts: 60 },
      compactionPoll: { intervalSeconds: 120, maxAttempts: 360 },
      snapshotPoll: { intervalSeconds: 120, maxAttempts: 360 },
      teardownPoll: { intervalSeconds: 30, maxAttempts: 20 },
      stateMachineTimeoutMinutes: 2880,
      kmsKeyArns: undefined,
      powertoolsLayerArn: undefined,
      logRetentionDays: 90,
      batchResultRetentionDays: 30,
      alarmEmail: undefined,
      sweepIntervalMinutes: 60,
      sweepGraceMinutes: 60,
    });
    expect(worstCaseHistoryEvents(s).parent).toBeLessThanOrEqual(HISTORY_EVENT_LIMIT / 2);
    expect(worstCaseHistoryEvents(s).attempt).toBeLessThanOrEqual(HISTORY_EVENT_LIMIT / 2);
  });

  test('every launch attempt is a child execution: maxLaunchAttempts up to its maximum fits at the defaults', () => {
    expect(read({ maxLaunchAttempts: 10 }).maxLaunchAttempts).toBe(10);
  });

  test('values from -c (strings) and from cdk.json (JSON types) are read alike', () => {
    const fromCli = read({
      instanceTypes: 'c7i.large, m7i.xlarge',
      allowOnDemand: 'false',
      volumeInitializationRate: '200',
      compactionPollSeconds: '300',
      kmsKeyArns: 'arn:aws:kms:us-east-1:111122223333:key/a,arn:aws:kms:us-east-1:111122223333:key/b',
    });
    const fromJson = read({
      instanceTypes: ['c7i.large', 'm7i.xlarge'],
      allowOnDemand: false,
      volumeInitializationRate: 200,
      compactionPollSeconds: 300,
      kmsKeyArns: ['arn:aws:kms:us-east-1:111122223333:key/a', 'arn:aws:kms:us-east-1:111122223333:key/b'],
    });
    expect(fromCli).toEqual(fromJson);
    expect(fromCli.instanceTypes).toEqual(['c7i.large', 'm7i.xlarge']);
    expect(fromCli.allowOnDemand).toBe(false);
    expect(fromCli.compactionPoll).toEqual({ intervalSeconds: 300, maxAttempts: 360 });
  });

  test('instance types: unset leaves the choice to prepare (by size and architecture); given, they win', () => {
    expect(read({ architecture: 'arm64' })).toMatchObject({
      architecture: 'arm64',
      instanceTypes: undefined,
    });
    expect(read({ instanceTypes: '' }).instanceTypes).toBeUndefined();
    expect(read({ instanceTypes: 'm7g.2xlarge' }).instanceTypes).toEqual(['m7g.2xlarge']);
  });

  test('source, block-list and attach polls are settings; the compaction poll takes only its shortest interval', () => {
    const s = read({
      sourcePollSeconds: '30',
      sourcePollMaxAttempts: '100',
      blockListPollSeconds: '15',
      blockListPollMaxAttempts: 40,
      attachPollSeconds: 5,
      attachPollMaxAttempts: 20,
      compactionPollSeconds: 60,
    });
    expect(s.sourcePoll).toEqual({ intervalSeconds: 30, maxAttempts: 100 });
    expect(s.blockListPoll).toEqual({ intervalSeconds: 15, maxAttempts: 40 });
    expect(s.attachPoll).toEqual({ intervalSeconds: 5, maxAttempts: 20 });
    expect(s.compactionPoll).toEqual({ intervalSeconds: 60, maxAttempts: COMPACTION_POLL_MAX_ATTEMPTS });
    expect(COMPACTION_POLL_MAX_ATTEMPTS).toBe(360);
  });

  test.each([
    [{ vpcId: 'vpc-0123456789abcdef0' }, /"vpcId" and "subnetIds" go together/],
    [{ subnetIds: 'subnet-0123456789abcdef0' }, /"vpcId" and "subnetIds" go together/],
    [{ vpcId: 'vpc-1', subnetIds: 'subnet-0123456789abcdef0' }, /"vpcId" must be a VPC id/],
    [
      { vpcId: 'vpc-0123456789abcdef0', subnetIds: 'subnet-0123456789abcdef0,sg-1' },
      /"subnetIds" must be a comma-separated list/,
    ],
    [{ architecture: 'i386' }, /"architecture" must be one of x86_64, arm64/],
    [{ allowOnDemand: 'yes' }, /"allowOnDemand" must be true or false/],
    [{ sourceVolumeIops: 100 }, /"sourceVolumeIops" must be a whole number from 3000 to 80000/],
    [{ sourceVolumeIops: 3000, sourceVolumeThroughput: 1000 }, /needs at least 4000 IOPS/],
    [{ volumeInitializationRate: 50 }, /0 \(off\) or 100-300 MiB\/s/],
    [{ volumeInitializationRate: 301 }, /"volumeInitializationRate" must be a whole number from 0 to 300/],
    [{ maxVolumeGiB: 70000 }, /"maxVolumeGiB" must be a whole number from 1 to 65536/],
    [{ triggerTagKey: 'aws:compact' }, /"triggerTagKey" must be a tag key .* does not start with "aws:"/],
    [{ triggerTagKey: 'ebs-snapshot-compactor:go' }, /"triggerTagKey"/],
    [{ stackName: '1stack' }, /"stackName" must be letters, digits and hyphens/],
    [{ instanceTypes: 'm7i' }, /"instanceTypes" must be a comma-separated list .* instance types/],
    [{ kmsKeyArns: 'alias/aws/ebs' }, /"kmsKeyArns" must be .* KMS key ARNs/],
    [
      { powertoolsLayerArn: 'arn:aws:lambda:us-east-1:017000801446:layer:X' },
      /"powertoolsLayerArn" must be a Lambda layer version ARN/,
    ],
    [{ logRetentionDays: 10 }, /"logRetentionDays" must be one of 1, 3, 5, 7, 14, 30/],
    [{ readyPollSeconds: '1.5' }, /"readyPollSeconds" must be a whole number/],
    [
      { snapshotPollMaxAttempts: 3000 },
      /allow \d+ history events in the worst case of one launch attempt execution, over the budget of 12500 \(half the Step Functions limit of 25000/,
    ],
    [{ sourcePollMaxAttempts: 2000 }, /one compaction workflow execution, over the budget/],
    [
      { blockListPollMaxAttempts: 800 },
      /allow 13636 history events in the worst case of one compaction workflow/,
    ],
    [{ blockListPollSeconds: 4 }, /"blockListPollSeconds" must be a whole number from 5 to 3600/],
    [{ attachPollMaxAttempts: 400 }, /one launch attempt execution, over the budget/],
    [
      { compactionPollMaxAttempts: 100 },
      /"compactionPollMaxAttempts" is no longer a setting.*at most 360 calls/,
    ],
    [{ sourcePollSeconds: 2 }, /"sourcePollSeconds" must be a whole number from 5 to 3600/],
    [{ attachPollMaxAttempts: 0 }, /"attachPollMaxAttempts" must be a whole number from 1 to 5000/],
  ])('%j is refused with a clear error', (context, message) => {
    expect(() => read(context)).toThrow(SettingsError);
    expect(() => read(context)).toThrow(message);
  });

  test('the history estimate of each execution grows with every bound it depends on, and only those', () => {
    const base = read({});
    const grows = (patch: Partial<Settings>) => {
      const [before, after] = [worstCaseHistoryEvents(base), worstCaseHistoryEvents({ ...base, ...patch })];
      return [after.parent > before.parent, after.attempt > before.attempt];
    };
    expect(grows({ maxLaunchAttempts: 4 })).toEqual([true, false]);
    expect(grows({ sourcePoll: { intervalSeconds: 60, maxAttempts: 361 } })).toEqual([true, false]);
    expect(grows({ blockListPoll: { intervalSeconds: 10, maxAttempts: 21 } })).toEqual([true, false]);
    expect(grows({ readyPoll: { intervalSeconds: 15, maxAttempts: 41 } })).toEqual([false, true]);
    expect(grows({ attachPoll: { intervalSeconds: 10, maxAttempts: 61 } })).toEqual([false, true]);
    expect(grows({ compactionPoll: { intervalSeconds: 120, maxAttempts: 361 } })).toEqual([false, true]);
    expect(grows({ snapshotPoll: { intervalSeconds: 120, maxAttempts: 361 } })).toEqual([false, true]);
    expect(grows({ teardownPoll: { intervalSeconds: 30, maxAttempts: 21 } })).toEqual([true, true]);
  });

  test('the history estimate: the parent polls sources and block lists, runs each attempt and two teardowns; an attempt polls ready, attach, 360 compaction calls, snapshot and teardown', () => {
    const s = read({});
    expect(worstCaseHistoryEvents(s)).toEqual({
      parent:
        (360 + 20 + 2 * 20) * EVENTS_PER_POLL_ITERATION +
        3 * PARENT_EVENTS_PER_ATTEMPT +
        EVENTS_OUTSIDE_LOOPS,
      attempt: (40 + 60 + 360 + 360 + 20) * EVENTS_PER_POLL_ITERATION + EVENTS_OUTSIDE_LOOPS,
    });
    // The compaction poll counts at its cap whatever the minimum interval: the plan may use every call.
    expect(worstCaseHistoryEvents(read({ compactionPollSeconds: 3600 }))).toEqual(worstCaseHistoryEvents(s));
  });
});

describe('the settings check the limits of contract/limits.json', () => {
  const limit = (name: keyof typeof contractLimits.limits) => contractLimits.limits[name].value;

  test('LIMITS is limits.json by name', () => {
    expect(LIMITS).toEqual(
      Object.fromEntries(Object.entries(contractLimits.limits).map(([name, l]) => [name, l.value])),
    );
    expect(COMPACTION_POLL_MAX_ATTEMPTS).toBe(limit('compactionPollMaxAttempts'));
    expect(HISTORY_EVENT_LIMIT).toBe(limit('historyEventLimit'));
    expect(EVENTS_PER_POLL_ITERATION).toBe(limit('historyEventsPerPollIteration'));
    expect(EVENTS_OUTSIDE_LOOPS).toBe(limit('historyEventsOutsideLoops'));
  });

  // [setting, lowest limit, highest limit, other context the value needs]
  const bounds: [string, number, number, Record<string, unknown>][] = [
    ['sourceVolumeIops', limit('gp3MinIops'), limit('gp3MaxIops'), { sourceVolumeThroughput: 125 }],
    [
      'sourceVolumeThroughput',
      limit('gp3MinThroughput'),
      limit('gp3MaxThroughput'),
      { sourceVolumeIops: 80000 },
    ],
    [
      'volumeInitializationRate',
      limit('volumeInitializationRateMin'),
      limit('volumeInitializationRateMax'),
      {},
    ],
    ['maxVolumeGiB', 1, limit('gp3MaxSizeGiB'), {}],
    [
      'maxLaunchAttempts',
      limit('maxLaunchAttemptsMin'),
      limit('maxLaunchAttemptsMax'),
      { teardownPollMaxAttempts: 1 },
    ],
    ['compactionPollSeconds', limit('pollSecondsMin'), limit('pollSecondsMax'), {}],
    ['readyPollSeconds', limit('pollSecondsMin'), limit('pollSecondsMax'), {}],
    [
      'stateMachineTimeoutMinutes',
      limit('stateMachineTimeoutMinutesMin'),
      limit('stateMachineTimeoutMinutesMax'),
      {},
    ],
  ];
  /** The range error of `key`, if reading throws one (10 launches break the history budget instead). */
  const rangeError = (context: Record<string, unknown>, key: string): string | undefined => {
    try {
      read(context);
    } catch (error) {
      const message = (error as Error).message;
      return message.includes(`"${key}" must be`) ? message : undefined;
    }
    return undefined;
  };
  test.each(bounds)('%s takes %d to %d and nothing outside', (key, low, high, other) => {
    expect(rangeError({ ...other, [key]: low }, key)).toBeUndefined();
    expect(rangeError({ ...other, [key]: high }, key)).toBeUndefined();
    expect(rangeError({ ...other, [key]: low - 1 }, key)).toBeDefined();
    expect(rangeError({ ...other, [key]: high + 1 }, key)).toBeDefined();
  });

  test('the throughput may use gp3MiBPerIops of the IOPS, not more', () => {
    const iops = 4000;
    const most = iops * limit('gp3MiBPerIops');
    expect(read({ sourceVolumeIops: iops, sourceVolumeThroughput: most }).sourceVolumeThroughput).toBe(most);
    expect(() => read({ sourceVolumeIops: iops, sourceVolumeThroughput: most + 1 })).toThrow(
      /needs at least/,
    );
  });
});

describe('contract/settings.json is what readSettings reads', () => {
  /** The context keys of contract/settings.json: a poll loop's entry stands for two. */
  const contextKeys = Object.entries(SETTINGS).flatMap(([key, spec]) =>
    spec.kind === 'pollLoop' ? [`${key}Seconds`, `${key}MaxAttempts`] : [key],
  );

  test('readSettings asks for every key of the file and no other (besides the retired compactionPollMaxAttempts)', () => {
    const asked = new Set<string>();
    readSettings({ tryGetContext: (key) => void asked.add(key) });
    expect([...asked].sort()).toEqual([...contextKeys, 'compactionPollMaxAttempts'].sort());
  });

  test("the defaults are the file's (null = unset)", () => {
    const s = read({});
    const value = (key: string): unknown => {
      if (key === 'compactionPollSeconds') return s.compactionPoll.intervalSeconds;
      return (s as unknown as Record<string, unknown>)[key];
    };
    for (const [key, spec] of Object.entries(SETTINGS)) {
      expect({ key, value: value(key) }).toEqual({ key, value: spec.default ?? undefined });
    }
  });

  test('every bound named is a limit of limits.json', () => {
    const names = Object.values(SETTINGS).flatMap((spec) =>
      [spec.min, spec.max].filter((b): b is string => typeof b === 'string'),
    );
    expect(names.length).toBeGreaterThan(0);
    expect(names.filter((name) => !(name in contractLimits.limits))).toEqual([]);
  });

  test("powertoolsLayerArn's default names the SSM parameter the stack resolves", () => {
    expect(SETTINGS.powertoolsLayerArn.defaultText).toContain(`\`${POWERTOOLS_LAYER_PARAMETER}\``);
  });

  test("docs/deploy.md states the defaults' worst case of history events and the limit", () => {
    const doc = fs
      .readFileSync(path.join(__dirname, '..', '..', 'docs', 'deploy.md'), 'utf8')
      .replace(/\s+/g, ' ');
    const defaults = worstCaseHistoryEvents(read({}));
    expect(doc).toContain(
      `The defaults come to ${defaults.parent.toLocaleString('en-US')} for the workflow and ` +
        `${defaults.attempt.toLocaleString('en-US')} for an attempt`,
    );
    expect(doc).toContain(`limit of ${HISTORY_EVENT_LIMIT.toLocaleString('en-US')} history events`);
    expect(doc).toContain(`${COMPACTION_POLL_MAX_ATTEMPTS} compaction calls`);
  });
});
