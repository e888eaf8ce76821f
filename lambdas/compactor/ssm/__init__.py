"""Systems Manager: running the Command document on the transfer instance."""
