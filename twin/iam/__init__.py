"""IAM proven, not assumed: the twin records every AWS call the Lambdas make and checks each against
the synthesized roles' policies with @cloud-copilot/iam-simulate
(recorder.py, resolve.py, check.py)."""
