"""A local AWS emulator: moto's server plus the behaviour the workflow needs that moto lacks."""
