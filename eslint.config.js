// Lints the CDK app and its tests only; other areas have their own linters.
const tseslint = require('typescript-eslint');

module.exports = tseslint.config(
  {
    ignores: [
      'node_modules/**',
      'cdk.out/**',
      '.venv/**',
      '.venv-checkov/**',
      'out/**',
      'twin/**',
      'lambdas/**',
      '**/*.js',
    ],
  },
  ...tseslint.configs.recommended,
  {
    files: ['bin/**/*.ts', 'lib/**/*.ts', 'test/cdk/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      eqeqeq: 'error',
      'no-console': 'off',
    },
  },
  {
    // Short functions with one job each (issue #9); tests are exempt.
    files: ['bin/**/*.ts', 'lib/**/*.ts'],
    rules: {
      'max-lines-per-function': ['error', { max: 60 }],
    },
  },
);
