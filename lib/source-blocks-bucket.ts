import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';

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
    this.bucket = new s3.Bucket(this, 'Bucket', {
      encryption: s3.BucketEncryption.S3_MANAGED,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      enforceSSL: true,
      versioned: false,
      lifecycleRules: [
        { expiration: Duration.days(days), abortIncompleteMultipartUploadAfter: Duration.days(1) },
      ],
      removalPolicy: RemovalPolicy.DESTROY,
      autoDeleteObjects: true,
    });
  }
}
