# Targets of the cdk area: the CDK app (bin/, lib/), its jest tests (test/cdk/) and the Command document.
.PHONY: lint-cdk test-cdk synth checkov
CDK_TS := bin lib test/cdk
CDK_CONFIG := tsconfig.json jest.config.js eslint.config.js .prettierrc
# A second synth with a user-supplied VPC, so cfn-lint sees both network variants; it also has the
# Image Builder trigger (off by default), so cdk-nag and cfn-lint see that too.
CDK_OWN_VPC_OUT := out/cdk-own-vpc
CDK_OWN_VPC_CONTEXT := -c vpcId=vpc-0123456789abcdef0 -c subnetIds=subnet-0123456789abcdef0,subnet-0fedcba9876543210 \
  -c imageBuilderPipelineArns=arn:aws:imagebuilder:us-east-1:111122223333:image-pipeline/golden-al2023

lint-cdk: setup
	npx tsc --noEmit -p tsconfig.json
	npx eslint --max-warnings 0 $(CDK_TS)
	npx prettier --check $(CDK_TS) $(CDK_CONFIG)

# jest never updates snapshots here (--ci); `npm run test:update-snapshots` is the only way to.
# The synth runs the cdk-nag checks: an unacknowledged finding fails it. cfn-lint fails on errors;
# W3005 (a DependsOn next to a GetAtt on the same role) is how CDK orders role policies, not a defect.
# TIER=unit (make check): jest only. In band: the stack is synthesized once per context and run, by
# the template server beside jest (test/cdk/template-cache.ts); what is left costs less CPU in one
# process (aws-cdk-lib compiled once) than in one worker per core, and the other lanes need the cores.
JEST_WORKERS ?= --runInBand
test-cdk: setup
	@mkdir -p $(REPORTS)
	npx jest --ci $(JEST_WORKERS) --json --outputFile=$(REPORTS)/$@.jest.json
ifneq ($(TIER),unit)
	$(MAKE) --no-print-directory synth
	rm -rf $(CDK_OWN_VPC_OUT)
	npx cdk synth --quiet --output $(CDK_OWN_VPC_OUT) $(CDK_OWN_VPC_CONTEXT)
	$(VENV)/bin/cfn-lint --non-zero-exit-code error --ignore-checks W3005 -- \
	  cdk.out/*.template.json $(CDK_OWN_VPC_OUT)/*.template.json
	$(MAKE) --no-print-directory checkov
endif

# checkov (the scanner enterprises run on templates) on both synthesized templates: any failed check fails.
# What the templates fail on purpose is skipped in their Metadata, each with its reason, from
# lib/checkov-suppressions.json (docs/deploy.md, "checkov suppressions"). Its own venv: checkov pins boto3
# exactly, to a version the project venv's pins exclude. --skip-download: nothing is fetched from Prisma
# Cloud (offline, and the same checks every run). Needs the templates (`make synth` and the own-VPC synth above).
CHECKOV_VENV := .venv-checkov
$(STAMPS)/checkov: requirements-checkov.txt
	python3 -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --disable-pip-version-check -q -r requirements-checkov.txt
	@mkdir -p $(STAMPS) && touch $@

checkov: $(STAMPS)/checkov
	$(CHECKOV_VENV)/bin/checkov --framework cloudformation --skip-download --compact --quiet \
	  -f cdk.out/*.template.json $(CDK_OWN_VPC_OUT)/*.template.json

synth: setup
	rm -rf cdk.out
	npx cdk synth --quiet --output cdk.out
