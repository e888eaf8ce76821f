import { Duration } from 'aws-cdk-lib';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as destinations from 'aws-cdk-lib/aws-lambda-destinations';
import * as sqs from 'aws-cdk-lib/aws-sqs';

/** How the trigger rules deliver to their targets: retried for two hours, then kept in the dead-letter queue. */
export type TargetDelivery = Pick<targets.TargetBaseProps, 'retryAttempts' | 'maxEventAge'> & {
  readonly deadLetterQueue: sqs.IQueue;
};

/** Lambda's own retries of an asynchronous invocation that raised (its default and maximum). */
export const TRIGGER_FUNCTION_RETRIES = 2;
/** How long Lambda keeps an event it could not yet run (its default and maximum). */
export const TRIGGER_FUNCTION_MAX_EVENT_AGE = Duration.hours(6);

/**
 * EventBridge invokes a trigger function asynchronously: the rule's dead-letter queue receives only events
 * EventBridge could not deliver. An event delivered but failed by the function (a throttled StartExecution,
 * AccessDenied) is retried by Lambda and then dropped unless the function has an on-failure destination: the
 * same queue, so every lost trigger event ends up in one place (docs/operations.md, "Lost trigger events").
 */
export function keepFailedInvocations(fn: lambda.Function, queue: sqs.IQueue): void {
  fn.configureAsyncInvoke({
    onFailure: new destinations.SqsDestination(queue),
    retryAttempts: TRIGGER_FUNCTION_RETRIES,
    maxEventAge: TRIGGER_FUNCTION_MAX_EVENT_AGE,
  });
}
