#!/usr/bin/env node
import { App } from 'aws-cdk-lib';
import { CompactorStack } from '../lib/compactor-stack';
import { checkWithCdkNag } from '../lib/nag-acknowledgements';
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
checkWithCdkNag(app);
