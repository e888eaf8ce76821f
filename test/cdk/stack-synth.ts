import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { CompactorStack } from '../../lib/compactor-stack';
import { readSettings } from '../../lib/settings';
import { withCdkJsonContext } from './cdk-json';

/**
 * A synth of the stack in this process, with cdk.json's context (feature flags) plus the given keys, as the
 * CLI would build it. Tests get templates through support.ts's synthTemplate (served once per jest run); this
 * is for what must synthesize anew (the template server, a synth that fails, the stability check).
 */
export function freshTemplate(context: Record<string, unknown> = {}): Template {
  const app = new App({ context: withCdkJsonContext(context) });
  const stack = new CompactorStack(app, 'Test', { settings: readSettings(app.node) });
  return Template.fromStack(stack);
}
