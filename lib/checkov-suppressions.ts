import { Aspects, CfnResource, IAspect, Stack } from 'aws-cdk-lib';
import { IConstruct } from 'constructs';
import suppressions from './checkov-suppressions.json';

/** One accepted checkov finding (lib/checkov-suppressions.json, the one place they are written). */
export interface CheckovSuppression {
  readonly check: string;
  readonly title: string;
  /** The CloudFormation type it applies to. */
  readonly resourceType: string;
  /** A regular expression on the construct path below the stack; absent: every resource of the type. */
  readonly path?: string;
  /** Where, in the words of docs/deploy.md. */
  readonly where: string;
  readonly reason: string;
}

export const CHECKOV_SUPPRESSIONS: readonly CheckovSuppression[] = suppressions.suppressions;

/** The suppressions that apply to a resource of `type` at `path` (below its stack). */
export function checkovSuppressionsFor(type: string, path: string): CheckovSuppression[] {
  return CHECKOV_SUPPRESSIONS.filter(
    (s) => s.resourceType === type && (s.path === undefined || new RegExp(s.path).test(path)),
  );
}

/**
 * Writes each suppression into its resources' Metadata as checkov reads it from a CloudFormation template
 * (`"checkov": {"skip": [{"id", "comment"}]}`), so the template says why next to what it accepts.
 */
class CheckovSuppressions implements IAspect {
  visit(node: IConstruct): void {
    if (!(node instanceof CfnResource)) return;
    const stackPath = Stack.of(node).node.path;
    const path = node.node.path.slice(stackPath.length + 1);
    const skip = checkovSuppressionsFor(node.cfnResourceType, path).map((s) => ({
      id: s.check,
      comment: s.reason,
    }));
    if (skip.length > 0) node.addMetadata('checkov', { skip });
  }
}

export function suppressCheckovFindings(stack: Stack): void {
  Aspects.of(stack).add(new CheckovSuppressions());
}
