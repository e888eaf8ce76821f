/** jest runs only the CDK tests; snapshots are updated by `npm run test:update-snapshots` alone. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test/cdk'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': 'ts-jest' },
  testTimeout: 120000,
};
