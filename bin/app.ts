#!/usr/bin/env node
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { CompactorStack } from '../lib/compactor-stack';
import { readSettings, SettingsError } from '../lib/settings';

const app = new App();
try {
  const settings = readSettings(app.node);
  new CompactorStack(app, 'EbsSnapshotCompactor', { settings });
} catch (error) {
  if (error instanceof SettingsError) {
    console.error(`ebs-snapshot-compactor: ${error.message}`);
    process.exit(1);
  }
  throw error;
}
// cdk-nag v3: findings are policy-validation violations; an unacknowledged one fails the synth.
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
