import os

# Powertools reads these when compactor.observability is imported, before any fixture runs
os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"
os.environ["POWERTOOLS_METRICS_NAMESPACE"] = "CompactorTest"
os.environ["POWERTOOLS_SERVICE_NAME"] = "compactor-test"
