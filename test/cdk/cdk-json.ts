import * as fs from 'fs';
import * as path from 'path';

/**
 * The context of cdk.json (feature flags, CLI settings): what `cdk synth` gives the app. Tests that build
 * an App themselves start from it, so they see the template users deploy.
 */
export const CDK_JSON_CONTEXT: Record<string, unknown> = JSON.parse(
  fs.readFileSync(path.join(__dirname, '..', '..', 'cdk.json'), 'utf8'),
).context;

/** cdk.json's context with the test's own keys on top. */
export function withCdkJsonContext(context: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...CDK_JSON_CONTEXT, ...context };
}
