import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';

/** The stack's buckets: SSE-S3, private, TLS only, owner-enforced, deleted with the stack; only their lifecycles differ. */
function privateBucket(scope: Construct, lifecycleRules: s3.LifecycleRule[]): s3.Bucket {
  return new s3.Bucket(scope, 'Bucket', {
    encryption: s3.BucketEncryption.S3_MANAGED,
    blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
    objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
    enforceSSL: true,
    versioned: false,
    lifecycleRules,
    removalPolicy: RemovalPolicy.DESTROY,
    autoDeleteObjects: true,
  });
}

export interface SourceBlocksBucketProps {
  /** Objects must outlive the longest execution: a relaunch late in a run fetches the bundle again. */
  readonly stateMachineTimeoutMinutes: number;
}

/**
 * Where list_source_blocks keeps each execution's block lists (`<execution>/source-blocks.tar.gz`) for the transfer
 * instance; teardown deletes an execution's prefix and a lifecycle rule catches what a lost execution left.
 * Block indexes only, no data.
 */
export class SourceBlocksBucket extends Construct {
  public readonly bucket: s3.Bucket;

  constructor(scope: Construct, id: string, props: SourceBlocksBucketProps) {
    super(scope, id);
    const days = Math.ceil(props.stateMachineTimeoutMinutes / 1440) + 1;
    this.bucket = privateBucket(this, [
      { expiration: Duration.days(days), abortIncompleteMultipartUploadAfter: Duration.days(1) },
    ]);
  }
}

/** Where the batch state machine's results go (lib/batch-workflow.ts): a key prefix of BatchResultsBucket. */
export const BATCH_RESULTS_PREFIX = 'batches';

export interface BatchResultsBucketProps {
  /** The batchResultRetentionDays setting: a lifecycle rule deletes a batch's files this many days after they are written. */
  readonly retentionDays: number;
}

/**
 * The batch results: the Distributed Map's ResultWriter files (`batches/<map run id>/manifest.json`,
 * `SUCCEEDED_0.json`, `FAILED_0.json`, ...) and summarize_batch's `batches/<batch execution>/batch-report.json`.
 * Not the source-blocks bucket: S3 applies the shorter of two overlapping expirations, so that bucket's
 * prefix-less rule (a few days) would delete batch results long before batchResultRetentionDays, and
 * teardown deletes `<execution name>/` there, which an execution named `batches` would turn into every result.
 */
export class BatchResultsBucket extends Construct {
  public readonly bucket: s3.Bucket;

  constructor(scope: Construct, id: string, props: BatchResultsBucketProps) {
    super(scope, id);
    this.bucket = privateBucket(this, [
      {
        id: 'ExpireBatchResults',
        prefix: `${BATCH_RESULTS_PREFIX}/`,
        expiration: Duration.days(props.retentionDays),
      },
      // The ResultWriter uploads large result files in parts; a failed Map Run can leave parts behind.
      { id: 'AbortIncompleteUploads', abortIncompleteMultipartUploadAfter: Duration.days(1) },
    ]);
  }
}
