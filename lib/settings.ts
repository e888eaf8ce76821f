/**
 * Deploy-time settings, read from CDK context (`cdk.json` or `-c key=value`) and validated at synth so a
 * bad value fails before anything reaches CloudFormation. docs/deploy.md ("Settings") documents every key;
 * the numbers the Lambdas check too come from contract/limits.json.
 */

import contractLimits from '../contract/limits.json';

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

/** CloudWatch Logs accepts only these retention periods. */
const LOG_RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
];

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
    stackName: reader.string(
      'stackName',
      'EbsSnapshotCompactor',
      /^[A-Za-z][A-Za-z0-9-]{0,63}$/,
      'letters, digits and hyphens, starting with a letter, at most 64 characters',
    ),
    ...readNetwork(reader),
    ...readInstance(reader),
    ...readVolumes(reader),
    triggerTagKey: reader.string(
      'triggerTagKey',
      'compact',
      /^(?!aws:)(?!ebs-snapshot-compactor:)[\p{L}\p{Z}\p{N}_.:/=+\-@]{1,128}$/u,
      'a tag key of at most 128 characters that does not start with "aws:" or "ebs-snapshot-compactor:"',
    ),
    ...readPollLoops(reader),
    stateMachineTimeoutMinutes: reader.integer(
      'stateMachineTimeoutMinutes',
      2880,
      LIMITS.stateMachineTimeoutMinutesMin,
      LIMITS.stateMachineTimeoutMinutesMax,
    ),
    ...readAccountResources(reader),
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
  const vpcId = reader.optionalString('vpcId', /^vpc-[0-9a-f]{8,17}$/, 'a VPC id like vpc-0123456789abcdef0');
  const subnetIds = reader.optionalList(
    'subnetIds',
    /^subnet-[0-9a-f]{8,17}$/,
    'subnet ids like subnet-0123456789abcdef0',
  );
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
    instanceTypes: reader.optionalList(
      'instanceTypes',
      /^[a-z][a-z0-9-]*\.[a-z0-9]+$/,
      'instance types like m7i.large',
    ),
    architecture: reader.oneOf('architecture', ['x86_64', 'arm64'] as const, 'x86_64'),
    allowOnDemand: reader.boolean('allowOnDemand', true),
    maxLaunchAttempts: reader.integer(
      'maxLaunchAttempts',
      3,
      LIMITS.maxLaunchAttemptsMin,
      LIMITS.maxLaunchAttemptsMax,
    ),
  };
}

/** gp3 performance of the source and target volumes, their initialization rate and largest size. */
function readVolumes(
  reader: ContextReader,
): Pick<
  Settings,
  'sourceVolumeIops' | 'sourceVolumeThroughput' | 'volumeInitializationRate' | 'maxVolumeGiB'
> {
  const iops = reader.integer('sourceVolumeIops', 16000, LIMITS.gp3MinIops, LIMITS.gp3MaxIops);
  const throughput = reader.integer(
    'sourceVolumeThroughput',
    1000,
    LIMITS.gp3MinThroughput,
    LIMITS.gp3MaxThroughput,
  );
  if (throughput > iops * LIMITS.gp3MiBPerIops) {
    throw new SettingsError(
      `Context "sourceVolumeThroughput" ${throughput} MiB/s needs at least ${Math.ceil(throughput / LIMITS.gp3MiBPerIops)} ` +
        `IOPS (gp3 allows ${LIMITS.gp3MiBPerIops} MiB/s per IOPS); raise "sourceVolumeIops" (now ${iops}) or lower the throughput.`,
    );
  }
  const [rateMin, rateMax] = [LIMITS.volumeInitializationRateMin, LIMITS.volumeInitializationRateMax];
  const rate = reader.integer('volumeInitializationRate', 0, 0, rateMax);
  if (rate !== 0 && rate < rateMin) {
    throw new SettingsError(
      `Context "volumeInitializationRate" must be 0 (off) or ${rateMin}-${rateMax} MiB/s, got ${rate}.`,
    );
  }
  return {
    sourceVolumeIops: iops,
    sourceVolumeThroughput: throughput,
    volumeInitializationRate: rate,
    maxVolumeGiB: reader.integer('maxVolumeGiB', 16384, 1, LIMITS.gp3MaxSizeGiB),
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
    sourcePoll: reader.pollLoop('sourcePoll', 60, 360),
    // each call lists for up to a slice (blockListSliceSeconds) at blockListPagesPerSecond pages of
    // blockListPageSize blocks: 20 calls cover 30 TiB of held data
    blockListPoll: reader.pollLoop('blockListPoll', 10, 20),
    readyPoll: reader.pollLoop('readyPoll', 15, 40),
    attachPoll: reader.pollLoop('attachPoll', 10, 60),
    compactionPoll: {
      intervalSeconds: reader.integer(
        'compactionPollSeconds',
        120,
        LIMITS.pollSecondsMin,
        LIMITS.pollSecondsMax,
      ),
      maxAttempts: COMPACTION_POLL_MAX_ATTEMPTS,
    },
    snapshotPoll: reader.pollLoop('snapshotPoll', 120, 360),
    teardownPoll: reader.pollLoop('teardownPoll', 30, 20),
  };
}

/** KMS keys, the Powertools layer and log retention: what the stack uses of the account. */
function readAccountResources(
  reader: ContextReader,
): Pick<Settings, 'kmsKeyArns' | 'powertoolsLayerArn' | 'logRetentionDays'> {
  const logRetentionDays = reader.integer('logRetentionDays', 90, 1, 3653);
  if (!LOG_RETENTION_DAYS.includes(logRetentionDays)) {
    throw new SettingsError(
      `Context "logRetentionDays" must be one of ${LOG_RETENTION_DAYS.join(', ')} (what CloudWatch Logs accepts), got ${logRetentionDays}.`,
    );
  }
  return {
    kmsKeyArns: reader.optionalList(
      'kmsKeyArns',
      /^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key\/[A-Za-z0-9*-]+$/,
      'KMS key ARNs like arn:aws:kms:us-east-1:111122223333:key/<key id>',
    ),
    powertoolsLayerArn: reader.optionalString(
      'powertoolsLayerArn',
      /^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$/,
      'a Lambda layer version ARN',
    ),
    logRetentionDays,
  };
}

/**
 * Worst case: prepare polls the sources to its bound, the block lists take theirs; every launch attempt waits, attaches, compacts
 * (the plan's attempts, at most COMPACTION_POLL_MAX_ATTEMPTS) and tears down to its bound; then the
 * snapshot loop and two more teardowns (success, then the warnings chain's or the failure chain's) run to theirs.
 */
export function worstCaseHistoryEvents(s: Settings): number {
  const compaction = Math.max(s.compactionPoll.maxAttempts, COMPACTION_POLL_MAX_ATTEMPTS);
  const perLaunch =
    s.readyPoll.maxAttempts + s.attachPoll.maxAttempts + compaction + s.teardownPoll.maxAttempts;
  const iterations =
    s.sourcePoll.maxAttempts +
    s.blockListPoll.maxAttempts +
    s.maxLaunchAttempts * perLaunch +
    s.snapshotPoll.maxAttempts +
    2 * s.teardownPoll.maxAttempts;
  return iterations * EVENTS_PER_POLL_ITERATION + EVENTS_OUTSIDE_LOOPS;
}

function checkHistoryBudget(s: Settings): void {
  const events = worstCaseHistoryEvents(s);
  if (events > HISTORY_EVENT_LIMIT) {
    throw new SettingsError(
      `The poll bounds allow ${events} history events in the worst case, over the Step Functions limit of ` +
        `${HISTORY_EVENT_LIMIT} (an execution that hits it fails without tearing down). Lower the *PollMaxAttempts ` +
        'settings or maxLaunchAttempts, and raise the matching *PollSeconds to keep the same total time.',
    );
  }
}

/** Context values arrive as strings from `-c key=value` and as JSON values from cdk.json. */
class ContextReader {
  constructor(private readonly context: ContextSource) {}

  private raw(key: string): unknown {
    const value = this.context.tryGetContext(key);
    return value === '' || value === null ? undefined : value;
  }

  isSet(key: string): boolean {
    return this.raw(key) !== undefined;
  }

  string(key: string, fallback: string, pattern: RegExp, what: string): string {
    return this.optionalString(key, pattern, what) ?? fallback;
  }

  optionalString(key: string, pattern: RegExp, what: string): string | undefined {
    const value = this.raw(key);
    if (value === undefined) return undefined;
    if (typeof value !== 'string' || !pattern.test(value)) {
      throw new SettingsError(`Context "${key}" must be ${what}, got ${JSON.stringify(value)}.`);
    }
    return value;
  }

  list(key: string, fallback: string[], pattern: RegExp, what: string): string[] {
    return this.optionalList(key, pattern, what) ?? fallback;
  }

  optionalList(key: string, pattern: RegExp, what: string): string[] | undefined {
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

  integer(key: string, fallback: number, min: number, max: number): number {
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

  boolean(key: string, fallback: boolean): boolean {
    const value = this.raw(key);
    if (value === undefined) return fallback;
    if (value === true || value === 'true') return true;
    if (value === false || value === 'false') return false;
    throw new SettingsError(`Context "${key}" must be true or false, got ${JSON.stringify(value)}.`);
  }

  oneOf<T extends string>(key: string, allowed: readonly T[], fallback: T): T {
    const value = this.raw(key);
    if (value === undefined) return fallback;
    if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
      throw new SettingsError(
        `Context "${key}" must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}.`,
      );
    }
    return value as T;
  }

  pollLoop(prefix: string, intervalSeconds: number, maxAttempts: number): PollLoopSettings {
    return {
      intervalSeconds: this.integer(
        `${prefix}Seconds`,
        intervalSeconds,
        LIMITS.pollSecondsMin,
        LIMITS.pollSecondsMax,
      ),
      maxAttempts: this.integer(`${prefix}MaxAttempts`, maxAttempts, 1, 5000),
    };
  }
}
