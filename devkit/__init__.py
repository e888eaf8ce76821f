"""Development tooling shared by the data-plane tests, the twin, the bench and `make lint`:
loop devices, disk building, chunk counting, mounts, generated doc tables and style checks."""
