/**
 * Deploy-time settings, read from CDK context (`cdk.json` or `-c key=value`) and validated at synth so a
 * bad value fails before anything reaches CloudFormation. Every key's default, bounds, pattern and meaning
 * are in contract/settings.json (docs/deploy.md "Settings" is generated from it); the numbers the Lambdas
 * check too come from contract/limits.json.
 */

import contractLimits from '../contract/limits.json';
import contractSettings from '../contract/settings.json';

export type Architecture = 'x86_64' | 'arm64';

export interface PollLoopSettings {
  /** Seconds the Wait state sleeps between two calls of the task. */
  readonly intervalSeconds: number;
  /** Calls of the task before the loop gives up with its timeout error. */
  readonly maxAttempts: number;
}

export interface Settings {
  readonly stackName: string;
  /** Both given: use this VPC and these subnets; both absent: the stack creates a small private VPC. */
  readonly vpcId?: string;
  readonly subnetIds?: string[];
  /** Undefined = prepare picks the types by the bytes to copy and the architecture (docs/deploy.md "Settings"). */
  readonly instanceTypes?: string[];
  readonly architecture: Architecture;
  readonly allowOnDemand: boolean;
  readonly sourceVolumeIops: number;
  readonly sourceVolumeThroughput: number;
  /** MiB/s; 0 = do not ask for a provisioned initialization rate. */
  readonly volumeInitializationRate: number;
  readonly maxVolumeGiB: number;
  readonly triggerTagKey: string;
  /** EC2 Image Builder pipelines whose AVAILABLE images are compacted; empty = no Image Builder trigger. */
  readonly imageBuilderPipelineArns?: string[];
  /** The copySharing of the executions the Image Builder trigger starts. */
  readonly imageBuilderCopySharing: boolean;
  readonly maxLaunchAttempts: number;
  /** Prepare is called until every source snapshot is `completed`. */
  readonly sourcePoll: PollLoopSettings;
  /** list_source_blocks is called until every source snapshot's blocks are listed. */
  readonly blockListPoll: PollLoopSettings;
  readonly readyPoll: PollLoopSettings;
  readonly attachPoll: PollLoopSettings;
  /**
   * intervalSeconds: the shortest interval the plan may choose (env COMPACTION_POLL_SECONDS); maxAttempts:
   * always COMPACTION_POLL_MAX_ATTEMPTS, the cap of the plan's attempts that the history budget counts.
   */
  readonly compactionPoll: PollLoopSettings;
  readonly snapshotPoll: PollLoopSettings;
  readonly teardownPoll: PollLoopSettings;
  readonly stateMachineTimeoutMinutes: number;
  /** Keys the workflow may use through EC2; undefined = every key of this account and Region. */
  readonly kmsKeyArns?: string[];
  /** Undefined = the public Powertools layer named by its SSM parameter, resolved at deploy. */
  readonly powertoolsLayerArn?: string;
  readonly logRetentionDays: number;
  /** Days the batch results bucket keeps a batch's result files and report (lib/source-blocks-bucket.ts). */
  readonly batchResultRetentionDays: number;
  /** Operations (lib/operations.ts): alarm e-mail (undefined = no subscription), sweeper schedule and grace. */
  readonly alarmEmail?: string;
  readonly sweepIntervalMinutes: number;
  readonly sweepGraceMinutes: number;
}

type LimitName = keyof typeof contractLimits.limits;

/** The numbers the stack and the Lambdas share, by name (contract/limits.json). */
export const LIMITS = Object.fromEntries(
  Object.entries(contractLimits.limits).map(([name, limit]) => [name, limit.value]),
) as Record<LimitName, number>;

/**
 * The compaction poll's interval and attempts come from the plan (sized by the bytes to copy); the plan
 * never asks for more calls than this, and the Choice of the loop stops here whatever the plan says.
 */
export const COMPACTION_POLL_MAX_ATTEMPTS = LIMITS.compactionPollMaxAttempts;

/** Step Functions fails an execution at this many history events, without running the teardown. */
export const HISTORY_EVENT_LIMIT = LIMITS.historyEventLimit;
/** Events of one poll iteration: Wait (2) + Lambda task (5) + counter Pass (2) + Choice (2). */
export const EVENTS_PER_POLL_ITERATION = LIMITS.historyEventsPerPollIteration;
/** Generous allowance for the states outside poll loops. */
export const EVENTS_OUTSIDE_LOOPS = LIMITS.historyEventsOutsideLoops;

/** A context key of contract/settings.json (a poll loop's entry names two keys: <key>Seconds, <key>MaxAttempts). */
export type SettingKey = keyof typeof contractSettings.settings;

/** One entry of contract/settings.json (its "$comment" describes the fields). */
export interface SettingSpec {
  readonly kind: 'string' | 'list' | 'integer' | 'boolean' | 'oneOf' | 'pollLoop';
  readonly default: unknown;
  /** A number, or the name of a limit in contract/limits.json. */
  readonly min?: number | string;
  readonly max?: number | string;
  readonly allowed?: readonly (string | number)[];
  readonly pattern?: string;
  readonly flags?: string;
  /** What a value must be, as the error message words it. */
  readonly accepts?: string;
  /** What an unset key means, when the default is null (docs/deploy.md). */
  readonly defaultText?: string;
  readonly meaning: string;
}

/** Every setting by context key (contract/settings.json). */
export const SETTINGS = contractSettings.settings as Record<SettingKey, SettingSpec>;

/** A bound of contract/settings.json: a number as it is, a name as its value in limits.json. */
function bound(value: number | string | undefined, setting: string): number {
  if (typeof value === 'number') return value;
  if (value !== undefined && value in LIMITS) return LIMITS[value as LimitName];
  throw new Error(`contract/settings.json: "${setting}" has no valid bound (${String(value)})`);
}

export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SettingsError';
  }
}

/** What the settings reader needs from a construct node: `app.node` fits. */
export interface ContextSource {
  tryGetContext(key: string): unknown;
}

export function readSettings(context: ContextSource): Settings {
  const reader = new ContextReader(context);
  rejectRetiredSettings(reader);
  const settings: Settings = {
    stackName: reader.string('stackName'),
    ...readNetwork(reader),
    ...readInstance(reader),
    ...readVolumes(reader),
    triggerTagKey: reader.string('triggerTagKey'),
    imageBuilderPipelineArns: reader.optionalList('imageBuilderPipelineArns'),
    imageBuilderCopySharing: reader.boolean('imageBuilderCopySharing'),
    ...readPollLoops(reader),
    stateMachineTimeoutMinutes: reader.integer('stateMachineTimeoutMinutes'),
    ...readAccountResources(reader),
    ...readOperations(reader),
  };
  checkHistoryBudget(settings);
  return settings;
}

function rejectRetiredSettings(reader: ContextReader): void {
  if (reader.isSet('compactionPollMaxAttempts')) {
    throw new SettingsError(
      'Context "compactionPollMaxAttempts" is no longer a setting: prepare sizes the compaction poll from the ' +
        `bytes to copy (at most ${COMPACTION_POLL_MAX_ATTEMPTS} calls, the interval grows instead); ` +
        '"compactionPollSeconds" sets the shortest interval.',
    );
  }
}

/** Both given: the user's VPC and subnets; both absent: the stack creates one. */
function readNetwork(reader: ContextReader): Pick<Settings, 'vpcId' | 'subnetIds'> {
  const vpcId = reader.optionalString('vpcId');
  const subnetIds = reader.optionalList('subnetIds');
  if ((vpcId === undefined) !== (subnetIds === undefined)) {
    throw new SettingsError(
      'Context "vpcId" and "subnetIds" go together: give both (use your VPC) or neither (the stack creates one).',
    );
  }
  return { vpcId, subnetIds };
}

function readInstance(
  reader: ContextReader,
): Pick<Settings, 'instanceTypes' | 'architecture' | 'allowOnDemand' | 'maxLaunchAttempts'> {
  return {
    instanceTypes: reader.optionalList('instanceTypes'),
    architecture: reader.oneOf<Architecture>('architecture'),
    allowOnDemand: reader.boolean('allowOnDemand'),
    maxLaunchAttempts: reader.integer('maxLaunchAttempts'),
  };
}

/** gp3 performance of the source and target volumes, their initialization rate and largest size. */
function readVolumes(
  reader: ContextReader,
): Pick<
  Settings,
  'sourceVolumeIops' | 'sourceVolumeThroughput' | 'volumeInitializationRate' | 'maxVolumeGiB'
> {
  const iops = reader.integer('sourceVolumeIops');
  const throughput = reader.integer('sourceVolumeThroughput');
  if (throughput > iops * LIMITS.gp3MiBPerIops) {
    throw new SettingsError(
      `Context "sourceVolumeThroughput" ${throughput} MiB/s needs at least ${Math.ceil(throughput / LIMITS.gp3MiBPerIops)} ` +
        `IOPS (gp3 allows ${LIMITS.gp3MiBPerIops} MiB/s per IOPS); raise "sourceVolumeIops" (now ${iops}) or lower the throughput.`,
    );
  }
  // 0 is off; otherwise EBS takes volumeInitializationRateMin to the maximum (the setting's max)
  const [rateMin, rateMax] = [LIMITS.volumeInitializationRateMin, LIMITS.volumeInitializationRateMax];
  const rate = reader.integer('volumeInitializationRate');
  if (rate !== 0 && rate < rateMin) {
    throw new SettingsError(
      `Context "volumeInitializationRate" must be 0 (off) or ${rateMin}-${rateMax} MiB/s, got ${rate}.`,
    );
  }
  return {
    sourceVolumeIops: iops,
    sourceVolumeThroughput: throughput,
    volumeInitializationRate: rate,
    maxVolumeGiB: reader.integer('maxVolumeGiB'),
  };
}

type PollLoopKey =
  | 'sourcePoll'
  | 'blockListPoll'
  | 'readyPoll'
  | 'attachPoll'
  | 'compactionPoll'
  | 'snapshotPoll'
  | 'teardownPoll';

function readPollLoops(reader: ContextReader): Pick<Settings, PollLoopKey> {
  return {
    sourcePoll: reader.pollLoop('sourcePoll'),
    blockListPoll: reader.pollLoop('blockListPoll'),
    readyPoll: reader.pollLoop('readyPoll'),
    attachPoll: reader.pollLoop('attachPoll'),
    compactionPoll: {
      intervalSeconds: reader.integer('compactionPollSeconds'),
      maxAttempts: COMPACTION_POLL_MAX_ATTEMPTS,
    },
    snapshotPoll: reader.pollLoop('snapshotPoll'),
    teardownPoll: reader.pollLoop('teardownPoll'),
  };
}

/** KMS keys, the Powertools layer and log retention: what the stack uses of the account. */
function readAccountResources(
  reader: ContextReader,
): Pick<Settings, 'kmsKeyArns' | 'powertoolsLayerArn' | 'logRetentionDays' | 'batchResultRetentionDays'> {
  const logRetentionDays = reader.integer('logRetentionDays');
  // CloudWatch Logs accepts only these retention periods
  const allowed = SETTINGS.logRetentionDays.allowed as number[];
  if (!allowed.includes(logRetentionDays)) {
    throw new SettingsError(
      `Context "logRetentionDays" must be one of ${allowed.join(', ')} (what CloudWatch Logs accepts), got ${logRetentionDays}.`,
    );
  }
  return {
    kmsKeyArns: reader.optionalList('kmsKeyArns'),
    powertoolsLayerArn: reader.optionalString('powertoolsLayerArn'),
    logRetentionDays,
    batchResultRetentionDays: reader.integer('batchResultRetentionDays'),
  };
}

/** The alarm e-mail and the sweeper's schedule (lib/operations.ts, docs/operations.md). */
function readOperations(
  reader: ContextReader,
): Pick<Settings, 'alarmEmail' | 'sweepIntervalMinutes' | 'sweepGraceMinutes'> {
  return {
    alarmEmail: reader.optionalString('alarmEmail'),
    sweepIntervalMinutes: reader.integer('sweepIntervalMinutes'),
    sweepGraceMinutes: reader.integer('sweepGraceMinutes'),
  };
}

/** Each execution's worst case must stay under half the limit: retries and redrives use the rest. */
export const HISTORY_EVENT_BUDGET = HISTORY_EVENT_LIMIT / 2;
/**
 * Events one launch attempt adds to the parent's history: `Run attempt` (startExecution.sync:2: entered,
 * scheduled, started, submitted, succeeded, exited) and the `Attempt outcome?`, `Launch again?` and `Relaunch`
 * states (2 each). test/cdk/history.test.ts checks it against the synthesized definition.
 */
export const PARENT_EVENTS_PER_ATTEMPT = 12;

/** The worst case of each execution: the compaction workflow (the parent) and one launch attempt (its child). */
export interface HistoryEvents {
  readonly parent: number;
  readonly attempt: number;
}

/**
 * Worst case, every loop to its bound: the parent polls the sources and the block lists, runs every launch
 * attempt (maxLaunchAttempts) and two teardowns (success, then the warnings chain's or the failure chain's); an
 * attempt waits until ready, attaches, compacts (the plan's calls, at most COMPACTION_POLL_MAX_ATTEMPTS),
 * snapshots and tears down (before a relaunch). test/cdk/history.test.ts computes the same from the synthesized
 * definitions and checks that this estimate is never below it.
 */
export function worstCaseHistoryEvents(s: Settings): HistoryEvents {
  const compaction = Math.max(s.compactionPoll.maxAttempts, COMPACTION_POLL_MAX_ATTEMPTS);
  const parentIterations =
    s.sourcePoll.maxAttempts + s.blockListPoll.maxAttempts + 2 * s.teardownPoll.maxAttempts;
  const attemptIterations =
    s.readyPoll.maxAttempts +
    s.attachPoll.maxAttempts +
    compaction +
    s.snapshotPoll.maxAttempts +
    s.teardownPoll.maxAttempts;
  return {
    parent:
      parentIterations * EVENTS_PER_POLL_ITERATION +
      s.maxLaunchAttempts * PARENT_EVENTS_PER_ATTEMPT +
      EVENTS_OUTSIDE_LOOPS,
    attempt: attemptIterations * EVENTS_PER_POLL_ITERATION + EVENTS_OUTSIDE_LOOPS,
  };
}

function checkHistoryBudget(s: Settings): void {
  const events = worstCaseHistoryEvents(s);
  const over = (
    [
      [
        'compaction workflow',
        events.parent,
        'sourcePollMaxAttempts, blockListPollMaxAttempts, teardownPollMaxAttempts',
      ],
      ['launch attempt', events.attempt, 'the ready, attach, snapshot and teardown *PollMaxAttempts'],
    ] as const
  ).find(([, n]) => n > HISTORY_EVENT_BUDGET);
  if (over) {
    const [which, n, keys] = over;
    throw new SettingsError(
      `The poll bounds allow ${n} history events in the worst case of one ${which} execution, over the budget of ` +
        `${HISTORY_EVENT_BUDGET} (half the Step Functions limit of ${HISTORY_EVENT_LIMIT}: an execution that hits ` +
        `the limit fails without tearing down). Lower ${keys}, and raise the matching *PollSeconds to keep the ` +
        'same total time.',
    );
  }
}

/**
 * Context values arrive as strings from `-c key=value` and as JSON values from cdk.json. Each reader takes
 * the key's default, bounds and pattern from contract/settings.json.
 */
class ContextReader {
  constructor(private readonly context: ContextSource) {}

  private raw(key: string): unknown {
    const value = this.context.tryGetContext(key);
    return value === '' || value === null ? undefined : value;
  }

  isSet(key: string): boolean {
    return this.raw(key) !== undefined;
  }

  string(key: SettingKey): string {
    return this.optionalString(key) ?? (SETTINGS[key].default as string);
  }

  optionalString(key: SettingKey): string | undefined {
    const [pattern, what] = patternOf(key);
    const value = this.raw(key);
    if (value === undefined) return undefined;
    if (typeof value !== 'string' || !pattern.test(value)) {
      throw new SettingsError(`Context "${key}" must be ${what}, got ${JSON.stringify(value)}.`);
    }
    return value;
  }

  optionalList(key: SettingKey): string[] | undefined {
    const [pattern, what] = patternOf(key);
    const value = this.raw(key);
    if (value === undefined) return undefined;
    const items = Array.isArray(value) ? value : typeof value === 'string' ? value.split(',') : undefined;
    const trimmed = items?.map((item) => (typeof item === 'string' ? item.trim() : item));
    if (
      !trimmed ||
      trimmed.length === 0 ||
      trimmed.some((item) => typeof item !== 'string' || !pattern.test(item))
    ) {
      throw new SettingsError(
        `Context "${key}" must be a comma-separated list (or JSON array) of ${what}, got ${JSON.stringify(value)}.`,
      );
    }
    return trimmed as string[];
  }

  /** A whole number within the key's bounds (min/max, else its lowest and highest allowed value). */
  integer(key: SettingKey): number {
    const spec = SETTINGS[key];
    const allowed = spec.allowed as number[] | undefined;
    const min = allowed ? Math.min(...allowed) : bound(spec.min, key);
    const max = allowed ? Math.max(...allowed) : bound(spec.max, key);
    return this.wholeNumber(key, spec.default as number, min, max);
  }

  private wholeNumber(key: string, fallback: number, min: number, max: number): number {
    const value = this.raw(key);
    if (value === undefined) return fallback;
    const parsed = typeof value === 'number' ? value : typeof value === 'string' ? Number(value.trim()) : NaN;
    if (!Number.isInteger(parsed) || parsed < min || parsed > max) {
      throw new SettingsError(
        `Context "${key}" must be a whole number from ${min} to ${max}, got ${JSON.stringify(value)}.`,
      );
    }
    return parsed;
  }

  boolean(key: SettingKey): boolean {
    const value = this.raw(key);
    if (value === undefined) return SETTINGS[key].default as boolean;
    if (value === true || value === 'true') return true;
    if (value === false || value === 'false') return false;
    throw new SettingsError(`Context "${key}" must be true or false, got ${JSON.stringify(value)}.`);
  }

  oneOf<T extends string>(key: SettingKey): T {
    const allowed = SETTINGS[key].allowed as readonly string[];
    const value = this.raw(key);
    if (value === undefined) return SETTINGS[key].default as T;
    if (typeof value !== 'string' || !allowed.includes(value)) {
      throw new SettingsError(
        `Context "${key}" must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}.`,
      );
    }
    return value as T;
  }

  /** `<key>Seconds` (pollSecondsMin to pollSecondsMax) and `<key>MaxAttempts` (1 to pollMaxAttemptsMax). */
  pollLoop(key: SettingKey): PollLoopSettings {
    const fallback = SETTINGS[key].default as PollLoopSettings;
    return {
      intervalSeconds: this.wholeNumber(
        `${key}Seconds`,
        fallback.intervalSeconds,
        LIMITS.pollSecondsMin,
        LIMITS.pollSecondsMax,
      ),
      maxAttempts: this.wholeNumber(`${key}MaxAttempts`, fallback.maxAttempts, 1, LIMITS.pollMaxAttemptsMax),
    };
  }
}

/** The pattern a string setting (or each item of a list setting) must match, and its wording. */
function patternOf(key: SettingKey): [RegExp, string] {
  const spec = SETTINGS[key];
  if (spec.pattern === undefined || spec.accepts === undefined) {
    throw new Error(`contract/settings.json: "${key}" has no pattern or accepts`);
  }
  return [new RegExp(spec.pattern, spec.flags ?? ''), spec.accepts];
}
