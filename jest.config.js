/** jest runs only the CDK tests; snapshots are updated by `npm run test:update-snapshots` alone. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test/cdk'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': 'ts-jest' },
  testTimeout: 120000,
  // one template server per run: each context is synthesized once, not in every file (test/cdk/template-cache.ts)
  globalSetup: '<rootDir>/test/cdk/global-setup.ts',
  globalTeardown: '<rootDir>/test/cdk/global-teardown.ts',
};
