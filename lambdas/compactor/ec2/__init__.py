"""EC2 instances: launching the transfer instance and watching it."""
