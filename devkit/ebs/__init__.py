"""One emulator of the EBS direct APIs (api.py) over pluggable block storage (store.py): in memory
on its own HTTP server for the data-plane tests and the bench (standin.py), in the twin's EC2
snapshots and sparse files behind moto (twin/emulator/ebs_store.py)."""
